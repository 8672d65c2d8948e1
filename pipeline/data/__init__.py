"""Data: from a corpus source to batches.

Owns: corpus sources (the embedded Bible, TSV, Moses, URLs), cleaning, the length-
stratified split, the split files (``pairs``), subword tokenization and the tokenized
dataset (``dataset``), token-bucketed batching.

May import: config, io, errors.
"""
