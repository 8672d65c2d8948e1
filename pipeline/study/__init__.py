"""Study: what the study claims and how a claim is judged.

Owns: the declared findings and the user's comparisons, their verdict rules
(``findings``), the seed-aware statistics behind them (``statistics``) and the typed
record of what they found (``record``: ``eval/findings.json``, written and read only
through it). Pure computation on tables of per-sentence statistics, no models; the one
file is the record's.

May import: nothing of the package.
"""
