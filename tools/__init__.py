"""Developer tools, kept out of the installed ``pipeline`` package (no DVC stage runs them);
they run from a checkout, e.g. ``python -m tools.browser reports/index.html``:

- ``tools.browser``: checks a report page in the system's headless Chromium;
- ``tools.mlflow_ui``: serves the MLflow store locally and screenshots its compare view;
- ``tools.readme_block``: the README's results block, generated from the committed study
  outputs (``--check`` for CI);
- ``tools.preset``: writes ``params.yaml`` from a preset (``make study PRESET=quick``);
- ``tools.first_run``: times the README's two commands on a fresh clone and writes the
  README's "Two commands" table from the results;
- ``tools.revisions``: two git revisions' train stage side by side (did a change cost
  speed?);
- ``tools.learning_curves`` and ``tools.plateau_calibration``: learning curves without
  early stopping, and the plateau rule replayed on them (the step cap's calibration);
- ``tools.preset``: writes ``params.yaml`` as the default study with a preset's keys over
  it (``make study PRESET=quick``).

``browser`` and ``mlflow_ui`` need Playwright and Pillow, from the ``test`` or ``dev``
extras (``pip install -e ".[dev]"``). docs/benchmarks.md, "Tools", says more.
"""
