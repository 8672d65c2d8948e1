"""Models: the RNN encoder-decoder, its attention and its search.

Owns: encoder, decoders (Luong and Bahdanau wirings, the no-attention baselines), the
scorer base class and the built-in scorers with the one ``attend`` (``attention``), the
loss, greedy and beam search, checkpoints.

May import: scorers, config, runtime, data, kernels, io.
"""
