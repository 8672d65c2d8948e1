"""Evaluate: the test set decoded by every variant, scored and judged.

Owns: decoding tasks (``decode``), BLEU per length bucket and attention statistics
(``metrics``), the findings assembled from the per-sentence statistics
(``verdicts``), and the stage itself (``stage``: decode, score, write, record).

May import: scorers, config, runtime, data, models, study, tracking, translate, io,
artifacts.
"""
