"""The attention-variant study: an importable library with no side effects at import."""
