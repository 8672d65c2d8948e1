"""The attention study: seq2seq models with different attention scorers, trained over a
grid, evaluated with seed-aware statistics, reported.

Packages, from the bottom up (each may import only those before it; a test checks it):

- ``errors``, ``io``, ``artifacts``, ``plotting``: shared modules (the project's error
  type, atomic writes, the files between stages, matplotlib primitives);
- ``scorers``: the catalogue of attention scorers and the user's plugin scorers;
- ``config``: params.yaml (sections, the grid of variants) and infra.yaml;
- ``runtime``: where and how code runs: devices, precision, Ray, process settings;
- ``data``: corpus sources, cleaning, splitting, subword tokenization, batching;
- ``kernels``: compiled and fused pieces the models call (the additive energy, ...);
- ``models``: encoder, decoders, attention, beam search, checkpoints;
- ``study``: what the study claims and how a claim is judged (findings, statistics);
- ``tracking``: MLflow and provenance;
- ``train``: training one variant (the trainer and its callbacks);
- ``translate``: a trained variant as a translator (command line, export, MLflow model);
- ``sweep``: the grid on Ray Tune (trials, collection, caching, MLflow per trial);
- ``evaluate``: decoding the test set, scoring, verdicts;
- ``report``: the HTML/Markdown report and its figures.

``stages/`` holds the DVC stages' command lines, one thin module each.
"""
