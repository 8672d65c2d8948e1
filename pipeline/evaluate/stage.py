"""The evaluate stage: decode the test set with every trained variant, score, judge, record.

Outputs (``eval/``, swapped in whole when everything succeeded):

- ``<variant>/``: ``hypotheses.txt``, ``metrics.json`` (BLEU with 95% bootstrap
  interval, chrF, sacreBLEU signature, BLEU per length bucket, attention statistics),
  ``by_length.csv``, ``attention.npz`` + ``attention.json`` (example matrices in
  original source order, with their subword pieces).
- ``summary.json``: every variant's headline numbers, failed variants, the sacreBLEU
  signature and the attention example ids; ``learning_curves.csv``: every variant's
  history.
- ``findings.json``, ``comparisons.csv``, ``ranking.csv``: the study's findings under beam
  search and under greedy decoding (:mod:`pipeline.study.findings`), every contrast with its
  seed-aware interval, p-values and MDE, the baseline's gates, the design lock
  (``models/design.json``, :mod:`pipeline.study.design`) against the design declared now,
  and the scorers ranked with intervals. Each
  variant's folder also holds ``sentence_stats.npz`` (sacreBLEU's per-sentence statistics
  of both decodings) and ``hypotheses_greedy.txt``.

And for DVC (``metrics_dir``, default ``metrics/``): ``test.json``, the headline numbers,
all numeric (the best scorer's test BLEU, mean test BLEU per scorer, verdict counts; the
columns of ``dvc exp show``; the words are ``summary.json``'s ``headline``);
``bleu_by_length.csv``, BLEU per bucket of each configuration (seed means),
``test_bleu.csv``, one row per variant, and ``learning_curves.csv``, dev BLEU and loss per
step (``dvc plots show``/``diff``).

MLflow (:mod:`pipeline.tracking.store`): an ``evaluation`` run keyed by ``eval_key`` (the hash
of the evaluate params, the test set and the evaluated variants' config hashes, also in
``eval/summary.json``) with one ``test:<variant>`` child per variant holding its test
scores (linked to the variant's logged model and the test set) next to its training
summary, tagged with the DVC experiment; the variant chosen on dev gets the registry
alias ``dev-best``.

One module a job: :mod:`~pipeline.evaluate.data` (what the jobs hand each other),
:mod:`~pipeline.evaluate.decode` (the decode tasks), :mod:`~pipeline.evaluate.scoring`,
:mod:`~pipeline.evaluate.verdicts` (the findings), :mod:`~pipeline.evaluate.tables` (the
tables, the summary, DVC's metrics) and :mod:`~pipeline.evaluate.registry` (MLflow); this
one runs them in order.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.artifacts import LEARNING_CURVES, STUDY_TABLE, VariantFiles
from pipeline.config.infra import Infra
from pipeline.config.params import Config, EvaluateConfig
from pipeline.data.dataset import TokenizedData
from pipeline.evaluate.data import (
    Decoded,
    EvaluatePaths,
    Evaluation,
    EvaluationError,
    TestSet,
    load_test_set,
)
from pipeline.evaluate.decode import DecodeSpec, decode_variant
from pipeline.evaluate.registry import log_evaluation
from pipeline.evaluate.scoring import score, write_variants
from pipeline.evaluate.tables import (
    eval_key,
    evaluation_summary,
    headline,
    learning_curves,
    study_table,
    write_dvc_metrics,
)
from pipeline.evaluate.verdicts import study_findings
from pipeline.io import atomic_dir, write_text
from pipeline.models.preflight import check_decoding
from pipeline.records.sweep import SWEEP_FILE, SweepRecord, VariantRecord
from pipeline.runtime.cluster import TaskResources, device_for, init_ray, ray_address, run_tasks
from pipeline.scorers.plugins import loaded as loaded_plugins
from pipeline.study.design import load_lock
from pipeline.tracking.outbox import send_pending
from pipeline.tracking.store import Tracker

logger = logging.getLogger(__name__)


def evaluate(config: Config, infra: Infra, paths: EvaluatePaths) -> dict[str, Any]:
    """Run the whole evaluate stage: decode, score, judge, write, record. Returns
    ``eval/summary.json``'s content plus ``numbers`` (``metrics/test.json``'s)."""
    started = time.time()
    sweep = SweepRecord.load(paths.models)
    trained = sweep.finished
    if not trained:
        raise EvaluationError(f"{paths.models / SWEEP_FILE}: no trained variant to evaluate")
    tracker = Tracker(infra)  # a store that cannot be used fails before decoding
    send_pending(tracker, infra.cache_dir, infra.tracking.outage_wait_seconds)  # runs before
    test = load_test_set(config, paths.raw)
    decoded = decode(config, infra, TokenizedData.load(paths.tok), paths.models, trained, test)
    scores = score(config, test, decoded)
    evaluation = Evaluation(config, paths, sweep, test, scores, started)
    with atomic_dir(paths.out) as tmp:
        write_variants(tmp, decoded, scores)
        lock = load_lock(paths.models)  # models/design.json, written when training started
        study = study_findings(config, evaluation.evaluated, test, scores, lock)
        study.write(tmp)
        curves = learning_curves(paths.models, trained)
        curves.to_csv(tmp / LEARNING_CURVES, index=False)
        key = eval_key(config, trained, test.sha256)
        summary = evaluation_summary(scores.metrics, sweep, test, key)
        table = study_table(sweep, summary)
        table.to_csv(tmp / STUDY_TABLE, index=False)
        numbers, words = headline(table, study)
        summary = replace(summary, headline=words)
        summary.write(tmp)
        write_text(
            tmp / "README.txt",
            "Generated by `dvc repro evaluate`; see pipeline/evaluate/stage.py.\n",
        )
    write_dvc_metrics(paths.metrics, numbers, scores.metrics, sweep, curves)
    try:  # the outputs are written: tracking trouble is a warning, not a failed stage
        log_evaluation(tracker, evaluation, summary, numbers["best_bleu_inside"])
    except Exception as err:
        logger.warning(
            "MLflow logging of the evaluation incomplete: %s: %s", type(err).__name__, err
        )
    return {**summary.to_json(), "numbers": numbers}


def _decodings(config: Config) -> dict[str, EvaluateConfig]:
    """The decodings the findings are judged under: ``beam`` (``evaluate.beam_size``, the
    headline numbers) and ``greedy``; only ``greedy`` when the beam size is 1."""
    if config.evaluate.beam_size == 1:
        return {"greedy": config.evaluate}
    return {"beam": config.evaluate, "greedy": config.evaluate.model_copy(update={"beam_size": 1})}


def decode(
    config: Config,
    infra: Infra,
    data: TokenizedData,
    models_dir: Path,
    trained: dict[str, VariantRecord],
    test: TestSet,
) -> Decoded:
    """Decode the test set with every trained variant, one Ray task per variant and
    decoding; the checkpoints and plugin sources travel with the tasks."""
    resources = TaskResources.from_config(infra.ray)
    plugins = tuple(loaded_plugins())
    specs = {
        variant_id: DecodeSpec(
            variant_id,
            _checkpoint_bytes(models_dir / variant_id),
            "test",
            config.evaluate,
            config.train.max_decode_ratio,
            tuple(int(i) for i in test.examples),
            resources,
            plugins,
        )
        for variant_id in trained
    }
    decodings = _decodings(config)
    greedy_specs = (
        {
            f"{i}@greedy": replace(spec, evaluate=decodings["greedy"], examples=())
            for i, spec in specs.items()
        }
        if "beam" in decodings
        else {}
    )
    _preflight(config, infra, data, trained, resources)
    init_ray(infra.ray)
    done = run_tasks(
        decode_variant,
        {**specs, **greedy_specs},
        resources,
        "decode test",
        (data,),
        infra.ray.pending_timeout_minutes,
    )
    greedy = {i: done[f"{i}@greedy"].hypotheses for i in trained} if greedy_specs else None
    return Decoded({i: done[i] for i in trained}, greedy)


def _preflight(
    config: Config,
    infra: Infra,
    data: TokenizedData,
    trained: dict[str, VariantRecord],
    resources: TaskResources,
) -> None:
    """Before Ray starts: every model family decodes a few sentences in
    ``evaluate.precision`` on this machine (a local Ray's trials run here)."""
    if ray_address(infra.ray) is not None:
        return  # the workers' hardware is not this machine's: decode tasks report errors
    start = time.perf_counter()
    models = {i: record.model for i, record in trained.items()}
    checks = check_decoding(
        models,
        data,
        config.evaluate.beam_size,
        config.evaluate.precision,
        device_for(resources.gpus),
    )
    logger.info(
        "preflight: %d model families decode in %s here (%.1f s)",
        len(checks),
        checks[0].precision,
        time.perf_counter() - start,
    )


def _checkpoint_bytes(folder: Path) -> bytes:
    path = VariantFiles(folder).checkpoint
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise EvaluationError(f"{path}: not found (run `dvc repro train`)") from None
