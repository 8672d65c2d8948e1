"""Corpus sources, cleaning, splitting, subword tokenization and batching."""
