"""Report: the study's report (HTML and Markdown) and its figures.

Owns: loading what evaluate wrote (``data``), the findings' tables and words
(``findings``), figures, sample translations, the report's sections built once as data
(``pages``, ``blocks``) and its two formats, HTML and Markdown (``writers``). (The
README block, the browser check and the MLflow UI screenshot are developer tools:
``tools/``.)

May import: scorers, config, data (the split files), study, tracking, io, artifacts,
plotting.
"""
