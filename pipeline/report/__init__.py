"""The report stage: figures, findings, HTML and Markdown rendering."""
