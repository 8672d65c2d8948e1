"""Study: what the study claims and how a claim is judged.

Owns: the declared findings and the user's comparisons (``declarations``, ``findings``),
their verdict rules and vocabulary (``labels``), the no-attention baseline's gates
(``gates``), the seed-aware statistics behind them (``statistics``), the design locked
before training (``design``: ``models/design.json``) and the typed record of what they
found (``record``: ``eval/findings.json``, written and read only through it). Pure
computation on tables of per-sentence statistics, no models; the files are the record's
and the lock's.

May import: config (the design is computed from the params).
"""
