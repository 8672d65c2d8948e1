"""Study: what the study claims and how a claim is judged.

Owns: the declared findings and the user's comparisons, their verdict rules
(``findings``) and the seed-aware statistics behind them (``statistics``). Pure
computation on tables of per-sentence statistics: no files, no models.

May import: nothing of the package.
"""
