"""Evaluate: the test set decoded by every variant, scored and judged.

Owns: what the stage's jobs pass each other (``data``), decoding tasks (``decode``),
BLEU per length bucket and attention statistics (``metrics``), scoring (``scoring``), the
findings assembled from the per-sentence statistics (``verdicts``), the tables and DVC
metrics (``tables``), the MLflow records (``registry``), and the stage itself
(``stage``: the jobs in order).

May import: scorers, config, runtime, data, models, study, tracking, translate, io,
artifacts.
"""
