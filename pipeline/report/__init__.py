"""Report: the study's report (HTML and Markdown), its figures and the README block.

Owns: loading what evaluate wrote (``data``), the findings' tables and words
(``findings``), figures, pages, sample translations, the browser check and the MLflow
UI screenshot.

May import: scorers, config, data (the split files), study, tracking, io, artifacts,
plotting.
"""
