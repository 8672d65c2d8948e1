"""Train: one variant, from initial weights to its best checkpoint.

Owns: the training loop (``trainer``), its stopping rules (``stopping``), its state and
resume file (``state``), its dev evaluations (``dev``) and its public hooks
(``callbacks``); the preflight checks, and the probes drawn from a trained variant (the
dev attention heatmap).

May import: scorers, config, runtime, data, kernels, models, io, artifacts, plotting.
"""
