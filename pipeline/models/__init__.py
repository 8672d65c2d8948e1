"""The seq2seq model: encoder, attention scorers, decoders, search, checkpoints."""
