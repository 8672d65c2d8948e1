"""Train: one variant, from initial weights to its best checkpoint.

Owns: the trainer (steps, evaluations, plateau, checkpoints, resume) and its public
hooks (``TrainCallback``), and the probes
drawn from a trained variant (the dev attention heatmap).

May import: scorers, config, runtime, data, kernels, models, io, artifacts, plotting.
"""
