"""Developer tools, kept out of the installed ``pipeline`` package (no DVC stage runs them);
they run from a checkout, e.g. ``python -m tools.browser reports/index.html``:

- ``tools.browser``: checks a report page in the system's headless Chromium;
- ``tools.mlflow_ui``: serves the MLflow store locally and screenshots its compare view;
- ``tools.readme_block``: the README's results block, generated from the committed study
  outputs (``--check`` for CI).

``browser`` and ``mlflow_ui`` need Playwright and Pillow, from the ``test`` or ``dev``
extras (``pip install -e ".[dev]"``).
"""
