"""Tracking: MLflow runs and what a run records about where it ran.

Owns: the MLflow store (``store``: runs found by key, resumable, DVC-experiment tags)
and provenance (git commit, machine).

May import: config, errors.
"""
