"""One thin CLI per DVC stage (see dvc.yaml)."""
