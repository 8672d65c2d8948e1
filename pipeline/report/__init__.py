"""Report: the study's report (HTML and Markdown) and its figures.

Owns: loading what evaluate wrote (``data``), the findings' tables and words
(``findings``), figures, pages and sample translations. (The README block, the browser
check and the MLflow UI screenshot are developer tools: ``tools/``.)

May import: scorers, config, data (the split files), study, tracking, io, artifacts,
plotting.
"""
