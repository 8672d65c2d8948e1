"""The evaluate stage's core: decode the test set with every trained variant and score it.

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
  seed-aware interval, p-values and MDE, and the scorers ranked with intervals. Each
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
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats
from tqdm import tqdm

from pipeline.artifacts import (
    COMPARISONS,
    CURVES_PLOTS_FILE,
    EVAL_SUMMARY,
    FINDINGS,
    GREEDY_HYPOTHESES,
    LEARNING_CURVES,
    METRICS_FILE,
    PLOTS_FILE,
    SENTENCE_STATS,
    STUDY_TABLE,
    SWEEP_FILE,
    VARIANT_PLOTS_FILE,
    EvalFiles,
    VariantFiles,
)
from pipeline.config.infra import Infra
from pipeline.config.params import Config, EvaluateConfig, ModelConfig
from pipeline.data.dataset import TokenizedData
from pipeline.data.pairs import parse_tsv_pairs, read_groups
from pipeline.evaluate.decode import (
    DecodeResult,
    DecodeSpec,
    attention_example_indices,
    decode_variant,
    write_hypotheses,
)
from pipeline.evaluate.metrics import Buckets, Scorer, score_system
from pipeline.evaluate.verdicts import StudyFindings, study_findings
from pipeline.io import atomic_dir, atomic_path, write_json, write_text
from pipeline.models.preflight import check_decoding
from pipeline.runtime.cluster import TaskResources, device_for, init_ray, ray_address, run_tasks
from pipeline.scorers.plugins import loaded as loaded_plugins
from pipeline.study.findings import VERDICTS
from pipeline.study.statistics import sentence_stats
from pipeline.tracking.outbox import send_pending
from pipeline.tracking.store import (
    Tracker,
    dataset_digest,
    experiment_key,
    training_summary,
)
from pipeline.translate.mlflow_model import save_pyfunc

logger = logging.getLogger(__name__)


TEST_RUN_SUMMARY = ("best_dev_bleu", "best_epoch", "epochs", "still_improving")
"""The training summary repeated on each ``test`` run, beside its test scores: enough to
say which variant is best and whether it had converged (the rest is on its training
run, ``training_run_id``). In name order they head MLflow's compare table."""


class EvaluationError(ValueError):
    """Missing or unusable inputs of the evaluate stage."""


def load_sweep(models_dir: Path) -> dict[str, Any]:
    path = models_dir / SWEEP_FILE
    if not path.is_file():
        raise EvaluationError(f"{path}: not found (run `dvc repro train`)")
    return json.loads(path.read_text())


def _decodings(config: Config) -> dict[str, EvaluateConfig]:
    """The decodings the findings are judged under: ``beam`` (``evaluate.beam_size``, the
    headline numbers) and ``greedy``; only ``greedy`` when the beam size is 1."""
    if config.evaluate.beam_size == 1:
        return {"greedy": config.evaluate}
    return {"beam": config.evaluate, "greedy": config.evaluate.model_copy(update={"beam_size": 1})}


def _metric_name(bucket: str) -> str:
    return "test_bleu_len_" + bucket.replace("+", "plus").replace("-", "_")


@dataclass(frozen=True)
class TestSet:
    """The test split as the scoring sees it."""

    file: Path
    sha256: str
    references: list[str]
    source_words: np.ndarray  # words per source sentence
    buckets: Buckets
    examples: np.ndarray  # sentences whose attention is kept
    target_language: str | None
    clusters: list[str] | None = None  # a chapter per sentence (test.groups), if written


def load_test_set(config: Config, raw_dir: Path) -> TestSet:
    test_file = raw_dir / "test.tsv"
    raw = test_file.read_bytes()  # read once: parsed and hashed
    pairs = parse_tsv_pairs(raw.decode("utf-8"))
    source_words = np.array([len(s.split()) for s, _ in pairs])
    split_cfg = config.fetch.split
    buckets = Buckets(split_cfg.bucket_width, split_cfg.num_buckets)
    examples = attention_example_indices(
        source_words,
        config.evaluate.attention_examples,
        buckets.width,
        buckets.count,
        config.evaluate.bootstrap_seed,
    )
    sha = hashlib.sha256(raw).hexdigest()
    references = [t for _, t in pairs]
    clusters = _clusters(raw_dir / "test.groups", len(pairs))
    return TestSet(
        test_file,
        sha,
        references,
        source_words,
        buckets,
        examples,
        _target_language(raw_dir),
        clusters,
    )


def _clusters(path: Path, sentences: int) -> list[str] | None:
    """The test sentences' cluster ids (one per line, e.g. ``book:chapter``), or None when
    the fetch stage wrote none; a file of the wrong length is an error."""
    if not path.exists():
        return None
    ids = read_groups(path)
    if len(ids) != sentences:
        raise EvaluationError(f"{path}: {len(ids)} cluster ids for {sentences} test sentences")
    return ids


def evaluate(
    config: Config,
    infra: Infra,
    tok_dir: Path,
    raw_dir: Path,
    models_dir: Path,
    out_dir: Path,
    metrics_dir: Path,
) -> dict[str, Any]:
    """Run the whole evaluate stage: decode, score, judge, write, record. Returns
    ``eval/summary.json``'s content plus ``numbers`` (``metrics/test.json``'s)."""
    started = time.time()
    sweep = load_sweep(models_dir)
    trained = {i: v for i, v in sweep["variants"].items() if v["status"] in ("finished", "cached")}
    if not trained:
        raise EvaluationError(f"{models_dir / SWEEP_FILE}: no trained variant to evaluate")
    tracker = Tracker(infra)  # a store that cannot be used fails before decoding
    send_pending(tracker, infra.cache_dir, infra.tracking.outage_wait_seconds)  # runs before
    test = load_test_set(config, raw_dir)
    decoded = decode(config, infra, TokenizedData.load(tok_dir), models_dir, trained, test)
    scores = score(config, test, decoded)
    with atomic_dir(out_dir) as tmp:
        write_variants(tmp, decoded, scores)
        study = study_findings(
            config,
            sweep,
            trained,
            scores.stats,
            test.source_words,
            test.buckets,
            scores.main,
            test.clusters,
        )
        study.write(tmp)
        curves = learning_curves(models_dir, trained)
        curves.to_csv(tmp / LEARNING_CURVES, index=False)
        key = eval_key(config, trained, test.sha256)
        summary = _summary(tmp, scores.metrics, sweep, test.examples, key)
        table = study_table(sweep, summary)
        table.to_csv(tmp / STUDY_TABLE, index=False)
        numbers, summary["headline"] = headline(table, study)
        write_json(tmp / EVAL_SUMMARY, summary)
    write_dvc_metrics(metrics_dir, numbers, scores.metrics, sweep, curves)
    try:  # the outputs are written: tracking trouble is a warning, not a failed stage
        best = {
            "scorer": summary["headline"]["best_scorer"],
            "chosen_on": summary["headline"]["best_chosen_on"],
            "bleu_inside": numbers["best_bleu_inside"],
        }
        _log_to_mlflow(
            tracker, config, sweep, scores.metrics, out_dir, models_dir, test, key, best, started
        )
    except Exception as err:
        logger.warning(
            "MLflow logging of the evaluation incomplete: %s: %s", type(err).__name__, err
        )
    return {**summary, "numbers": numbers}


@dataclass
class Decoded:
    """Every variant's decodings: the main one (beam, or greedy when the beam is 1) with
    its attention examples, and the greedy hypotheses beside a beam."""

    results: dict[str, DecodeResult]  # variant -> the main decoding
    greedy: dict[str, list[str]] | None = None  # variant -> greedy hypotheses (beside a beam)

    @property
    def main(self) -> str:
        return "greedy" if self.greedy is None else "beam"

    @property
    def hypotheses(self) -> dict[str, dict[str, list[str]]]:
        """Decoding -> variant -> hypotheses."""
        main = {i: r.hypotheses for i, r in self.results.items()}
        return {self.main: main} if self.greedy is None else {"beam": main, "greedy": self.greedy}


def decode(
    config: Config,
    infra: Infra,
    data: TokenizedData,
    models_dir: Path,
    trained: dict[str, dict],
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
    trained: dict[str, dict],
    resources: TaskResources,
) -> None:
    """Before Ray starts: every model family decodes a few sentences in
    ``evaluate.precision`` on this machine (a local Ray's trials run here)."""
    if ray_address(infra.ray) is not None:
        return  # the workers' hardware is not this machine's: decode tasks report errors
    start = time.perf_counter()
    models = {i: ModelConfig(**info["model"]) for i, info in trained.items()}
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


@dataclass
class Scores:
    main: str
    metrics: dict[str, dict[str, Any]]  # variant -> eval/<variant>/metrics.json
    stats: dict[str, dict[str, np.ndarray]]  # decoding -> variant -> sentence statistics


def score(config: Config, test: TestSet, decoded: Decoded) -> Scores:
    """sacreBLEU per variant (overall and per length bucket, with bootstrap intervals)
    and the per-sentence statistics of every decoding, for the findings."""
    scorer = Scorer(test.target_language, seed=config.evaluate.bootstrap_seed)
    decodings = decoded.hypotheses
    metrics, stats = {}, {name: {} for name in decodings}
    for variant_id in tqdm(decoded.results, desc="score test", unit="variant"):
        for name, hypotheses in decodings.items():
            stats[name][variant_id] = sentence_stats(
                hypotheses[variant_id], test.references, scorer.target_language
            )
        result = score_system(
            scorer,
            decoded.results[variant_id].hypotheses,
            test.references,
            test.source_words,
            test.buckets,
            config.evaluate.bootstrap_samples,
            config.fetch.split.max_train_words,
        )
        result.update(decoded.results[variant_id].stats)
        result["beam_size"] = config.evaluate.beam_size
        metrics[variant_id] = result
    return Scores(decoded.main, metrics, stats)


def write_variants(out: Path, decoded: Decoded, scores: Scores) -> None:
    """``<out>/<variant>/``: hypotheses, attention examples, metrics, by-length table and
    sentence statistics."""
    for variant_id, result in decoded.results.items():
        result.write(out / variant_id)
        files = EvalFiles(out / variant_id)
        if decoded.greedy is not None:
            write_hypotheses(files.folder / GREEDY_HYPOTHESES, decoded.greedy[variant_id])
        with atomic_path(files.folder / SENTENCE_STATS) as path, open(path, "wb") as handle:
            np.savez_compressed(handle, **{n: s[variant_id] for n, s in scores.stats.items()})
        metrics = scores.metrics[variant_id]
        write_json(files.metrics, metrics)
        pd.DataFrame(metrics["by_length"]).to_csv(files.by_length, index=False)


def write_dvc_metrics(
    metrics_dir: Path, top: dict, metrics: dict, sweep: dict, curves: pd.DataFrame
) -> None:
    """``metrics/``: the headline numbers (``test.json``) and the plots' tables: BLEU by
    length per configuration (seed means), test BLEU per variant, learning curves."""
    write_json(metrics_dir / METRICS_FILE, top)
    with atomic_path(metrics_dir / PLOTS_FILE) as path:
        length_plot_table(metrics, sweep).to_csv(path, index=False)
    with atomic_path(metrics_dir / VARIANT_PLOTS_FILE) as path:
        rows = [{"variant": i, "bleu": r["bleu"]} for i, r in metrics.items()]
        pd.DataFrame(rows, columns=["variant", "bleu"]).to_csv(path, index=False)
    scorer = {i: v["model"]["scorer"] for i, v in sweep["variants"].items()}
    if len(curves):
        curves = curves.assign(scorer=curves.variant.map(scorer))
    with atomic_path(metrics_dir / CURVES_PLOTS_FILE) as path:
        curves.reindex(columns=CURVE_COLUMNS).to_csv(path, index=False)


CURVE_COLUMNS = ["variant", "scorer", "step", "dev_bleu", "dev_loss"]


def configurations(sweep: dict, variants) -> dict[str, str]:
    """Each variant's configuration: its values of the grid axes that vary, but the seed
    (``additive``, ``additive, reverse_source=True``); a variant without an axis (a
    ``grid_include`` entry) takes its config's value."""
    infos = {i: sweep["variants"][i] for i in variants}

    def value(info: dict, key: str):
        return info["axes"].get(key, info["model"].get(key, info["train"].get(key)))

    keys = sorted({k for v in infos.values() for k in v["axes"]} - {"scorer", "seed"})
    varying = [k for k in keys if len({str(value(v, k)) for v in infos.values()}) > 1]
    return {
        i: ", ".join([str(v["model"]["scorer"])] + [f"{k}={value(v, k)}" for k in varying])
        for i, v in infos.items()
    }


def length_plot_table(metrics: dict, sweep: dict) -> pd.DataFrame:
    """BLEU per length bucket, the mean over seeds of each configuration: one line per
    configuration in ``dvc plots show``, coloured by scorer; with each bucket's test
    sentences, whether its lengths were inside the training lengths, and a 95% interval
    (``low``, ``high``): over the seeds (mean +- t * sd / sqrt(k)), or with one seed its
    bootstrap interval over the bucket's sentences (test sampling only)."""
    names = configurations(sweep, metrics)
    rows = [
        {
            "configuration": names[i],
            "scorer": sweep["variants"][i]["model"]["scorer"],
            "bucket": entry["bucket"],
            "sentences": entry["sentences"],
            "training_range": entry["training_range"],
            "bleu": entry["bleu"],
            "bleu_low": entry.get("bleu_low", float("nan")),
            "bleu_high": entry.get("bleu_high", float("nan")),
        }
        for i, result in metrics.items()
        for entry in result["by_length"]
    ]
    keys = ["configuration", "scorer", "bucket", "sentences", "training_range"]
    frame = pd.DataFrame(rows, columns=[*keys, "bleu", "bleu_low", "bleu_high"])
    out = frame.groupby(keys, sort=False).apply(_seed_interval, include_groups=False)
    out = out.reset_index().astype({"seeds": int})
    return out.round({"bleu": 2, "low": 2, "high": 2})


def _seed_interval(rows: pd.DataFrame) -> pd.Series:
    k, mean = len(rows), float(rows.bleu.mean())
    if k > 1:
        half = float(scipy_stats.t.ppf(0.975, k - 1) * rows.bleu.std(ddof=1) / np.sqrt(k))
        low, high = mean - half, mean + half
    else:
        low, high = float(rows.bleu_low.iloc[0]), float(rows.bleu_high.iloc[0])
    return pd.Series({"bleu": mean, "seeds": k, "low": low, "high": high})


def _checkpoint_bytes(folder: Path) -> bytes:
    path = VariantFiles(folder).checkpoint
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise EvaluationError(f"{path}: not found (run `dvc repro train`)") from None


def _target_language(raw_dir: Path) -> str | None:
    corpus = raw_dir / "corpus.json"
    if corpus.is_file():
        return json.loads(corpus.read_text()).get("source", {}).get("target_language")
    return None


def learning_curves(models_dir: Path, trained: dict[str, dict]) -> pd.DataFrame:
    """Every trained variant's ``history.csv`` (one row per dev evaluation), stacked with
    a ``variant`` column: the report's learning curves."""
    frames = []
    for variant_id in trained:
        path = VariantFiles(models_dir / variant_id).history
        if path.is_file():
            frames.append(pd.read_csv(path).assign(variant=variant_id))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["variant"])


def eval_key(config: Config, trained: dict[str, dict], test_sha: str) -> str:
    """What an evaluation's numbers depend on: the evaluate params, the test set and the
    evaluated variants' config hashes (its MLflow runs' key; stable across reruns)."""
    payload = {
        "evaluate": config.evaluate.model_dump(),
        "buckets": [config.fetch.split.bucket_width, config.fetch.split.num_buckets],
        "max_decode_ratio": config.train.max_decode_ratio,
        "test": test_sha,
        "variants": {i: v["config_hash"] for i, v in sorted(trained.items())},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def study_table(sweep: dict, summary: dict) -> pd.DataFrame:
    """One row per variant of the grid: axes, test scores, training summary."""
    rows = []
    for variant_id, info in sweep["variants"].items():
        test = summary["variants"].get(variant_id, {})
        train_metrics, tags = training_summary(info) if info["status"] != "failed" else ({}, {})
        rows.append(
            {
                "variant": variant_id,
                "status": "finished" if test else "failed",
                **{k: info["model"].get(k) for k in ("scorer", "reverse_source", "hidden_size")},
                **{k: v for k, v in info["axes"].items() if k not in info["model"]},
                "bleu": test.get("bleu"),
                "bleu_low": test.get("bleu_low"),
                "bleu_high": test.get("bleu_high"),
                "chrf": test.get("chrf"),
                "train_precision": info.get("precision"),
                "decode_precision": summary.get("decode_precision", {}).get(variant_id),
                **train_metrics,
                **tags,
                "error": info.get("error") or "",
            }
        )
    return pd.DataFrame(rows)


def verdict_counts(verdicts) -> dict[str, int]:
    """How many findings got each verdict, keyed in snake_case (``smaller_than_claimed``):
    every word of :data:`~pipeline.study.findings.VERDICTS` (0 when none got it, so
    ``dvc exp show``'s columns stay the same between experiments), then any other word
    found, so that no finding goes uncounted. All numeric."""
    verdicts = list(verdicts)
    words = dict.fromkeys([*VERDICTS, *verdicts])
    return {str(v).replace(" ", "_"): sum(x == v for x in verdicts) for v in words}


def headline(table: pd.DataFrame, study: StudyFindings) -> tuple[dict, dict]:
    """The study's answer, as numbers and as words.

    Numbers (``metrics/test.json``, what ``dvc metrics diff`` and ``dvc exp show``
    compare; all numeric, snake_case): the test BLEU of the one "best" scorer (chosen on
    dev) and each scorer's mean over seeds at the findings' configuration, inside the
    training lengths and on all of test; how many findings got each verdict; failed and
    capped variants. Words (``eval/summary.json``'s ``headline``): the best scorer's
    name, how it was chosen, and each finding's verdict per decoding."""

    def rounded(value: float) -> float | None:
        return None if pd.isna(value) else round(float(value), 2)

    ranking = study.ranking[study.main]
    by_scorer = ranking.set_index("scorer") if len(ranking) else pd.DataFrame()
    best = study.reference
    verdicts = {f.title: f.verdict for f in study.findings[study.main]}
    numbers: dict[str, Any] = {
        "best_bleu_inside": rounded(by_scorer.loc[best, "bleu_inside"]) if best else None,
        "best_bleu_all": rounded(by_scorer.loc[best, "bleu_all"]) if best else None,
        "bleu_inside": {s: rounded(r.bleu_inside) for s, r in by_scorer.iterrows()},
        "bleu_all": {s: rounded(r.bleu_all) for s, r in by_scorer.iterrows()},
        "findings": verdict_counts(verdicts.values()),
        "failed_variants": int((table.status != "finished").sum()),
        "capped_variants": len(study.excluded),  # stopped at the step cap: not confirmatory
    }
    words: dict[str, Any] = {
        "best_scorer": best,
        "best_chosen_on": "dev BLEU, mean over equal seeds",
        "verdicts": verdicts,
    }
    if len(study.findings) > 1:
        words["verdicts_greedy"] = {f.title: f.verdict for f in study.findings["greedy"]}
    return numbers, words


def _summary(tmp: Path, metrics: dict, sweep: dict, examples: np.ndarray, key: str) -> dict:
    top = {
        variant_id: {
            "bleu": result["bleu"],
            "bleu_low": result["bleu_low"],
            "bleu_high": result["bleu_high"],
            "chrf": result["chrf"],
            **{_metric_name(b["bucket"])[5:]: b["bleu"] for b in result["by_length"]},
        }
        for variant_id, result in metrics.items()
    }
    failed = sorted(i for i, v in sweep["variants"].items() if i not in metrics)
    summary = {
        "eval_key": key,
        "variants": top,
        "failed_variants": failed,
        "signature": next(iter(metrics.values()))["signature"],
        "attention_examples": examples.tolist(),
        "decode_precision": {i: r.get("precision") for i, r in sorted(metrics.items())},
    }
    write_json(tmp / EVAL_SUMMARY, summary)
    write_text(
        tmp / "README.txt", "Generated by `dvc repro evaluate`; see pipeline/evaluate/stage.py.\n"
    )
    return summary


REGISTERED_ALIAS = "dev-best"
"""The registry alias of the variant chosen on dev (``models:/<experiment>@dev-best``)."""


def dev_choice(sweep: dict, evaluated: dict, scorer: str | None) -> str | None:
    """The variant a user would deploy, chosen on dev only: of the evaluated variants
    (of the study's best scorer, chosen on dev, when there is one), the one with the
    highest dev BLEU at its best checkpoint."""
    scored = {
        i: sweep["variants"][i].get("best_dev_bleu")
        for i in evaluated
        if scorer is None or sweep["variants"][i]["model"]["scorer"] == scorer
    }
    scored = {i: float(v) for i, v in scored.items() if v is not None and math.isfinite(v)}
    return max(sorted(scored), key=scored.get) if scored else None


def _log_to_mlflow(
    tracker: Tracker,
    config: Config,
    sweep: dict,
    metrics: dict,
    out_dir: Path,
    models_dir: Path,
    test: TestSet,
    key: str,
    best: dict[str, Any],
    started: float,
) -> None:
    """The evaluation's MLflow runs: a parent (the study table, the findings, the best
    scorer chosen on dev; the report stage adds the report) timed from the stage's start,
    and one ``test:<variant>`` child per variant, timed by its decoding, with its test
    scores linked to the variant's logged model and the test set; the variant chosen on
    dev gets the registry alias :data:`REGISTERED_ALIAS`. Found by tags, so a rerun or a
    deleted run never breaks the stage."""
    evaluate_params = {f"evaluate.{k}": v for k, v in config.evaluate.model_dump().items()}
    parent_id = tracker.find_or_start(
        f"evaluate-{time.strftime('%Y%m%d-%H%M%S', time.localtime(started))}",
        experiment_key({"kind": "evaluation", "eval_key": key}),
        params={**evaluate_params, "variants": len(metrics)},
        tags={"data_hash": sweep.get("data_hash", "")},
        start_time_ms=int(started * 1000),
    )
    try:
        models = _log_test_runs(
            tracker, parent_id, sweep, metrics, out_dir, models_dir, test, key, evaluate_params
        )
        if best.get("scorer"):  # the study's one "best": the scorer chosen on dev
            tracker.log_metrics(parent_id, {"best_test_bleu": best["bleu_inside"]})
            tracker.set_tags(
                parent_id, {"best_scorer": best["scorer"], "best_chosen_on": best["chosen_on"]}
            )
        chosen = dev_choice(sweep, metrics, best.get("scorer"))
        if chosen in models:
            name = tracker.experiment_name
            version = tracker.register(
                name, models[chosen], REGISTERED_ALIAS, {"variant": chosen, "chosen_on": "dev BLEU"}
            )
            tracker.set_tags(
                parent_id,
                {
                    "registered_model": f"models:/{name}@{REGISTERED_ALIAS}",
                    "registered_variant": chosen,
                    "registered_version": version,
                },
            )
            logger.info(
                "MLflow: %s is models:/%s@%s (version %s)", chosen, name, REGISTERED_ALIAS, version
            )
        tracker.finish(parent_id)
    except Exception:
        tracker.finish(parent_id, "FAILED")
        raise


def _log_test_runs(
    tracker, parent_id, sweep, metrics, out_dir, models_dir, test: TestSet, key, evaluate_params
) -> dict[str, str]:
    """One ``test`` run per variant; returns variant -> its logged model's id."""
    training_runs = tracker.newest_by("config_hash", {"kind": "train"})
    dataset = ("test", dataset_digest(test.sha256))
    axes = sorted({k for v in sweep["variants"].values() for k in v["axes"]})
    models = {}
    for variant_id, result in tqdm(metrics.items(), desc="MLflow test runs", unit="run"):
        info = sweep["variants"][variant_id]
        train_metrics, tags = training_summary(info)
        training = training_runs.get(info["config_hash"])
        if training is not None:
            tags["training_run_id"] = training.info.run_id
        decoded_at = result.get("decode_started", time.time())
        run_id = tracker.find_or_start(
            f"test:{variant_id}",
            experiment_key({"kind": "test", "eval_key": key, "config_hash": info["config_hash"]}),
            parent_id=parent_id,
            params={**variant_params(info, axes), **evaluate_params},
            tags={"variant": variant_id, "sacrebleu_signature": result["signature"], **tags},
            start_time_ms=int(decoded_at * 1000),
        )
        source_run = training.info.run_id if training is not None else run_id
        model_id = variant_model(tracker, info, models_dir / variant_id, source_run)
        if model_id:
            models[variant_id] = model_id
            tracker.set_tags(run_id, {"model_id": model_id})
        values = {"test_bleu": result["bleu"], "test_bleu_low": result["bleu_low"]}
        values.update(test_bleu_high=result["bleu_high"], test_chrf=result["chrf"])
        values.update({_metric_name(b["bucket"]): b["bleu"] for b in result["by_length"]})
        tracker.log_metrics(run_id, values, model_id=model_id, dataset=dataset)
        summary = {k: v for k, v in train_metrics.items() if k in TEST_RUN_SUMMARY}
        tracker.log_metrics(run_id, summary)
        tracker.log_dataset(run_id, "test", test.file, test.sha256, "evaluation")
        files = EvalFiles(out_dir / variant_id)
        tracker.log_artifacts(run_id, [files.metrics, files.by_length, files.hypotheses])
        ended = decoded_at + result.get("decode_seconds", 0.0)
        tracker.finish(run_id, end_time_ms=int(ended * 1000))
    tracker.log_artifacts(
        parent_id, [out_dir / STUDY_TABLE, out_dir / COMPARISONS, out_dir / FINDINGS]
    )
    return models


def variant_model(tracker: Tracker, info: dict, folder: Path, run_id: str) -> str | None:
    """The variant's logged model (an MLflow model that translates). A variant without
    one (taken from the variant cache, or logged by an older version as a bare
    checkpoint) gets it now, from ``models/<variant>/``, as a model of ``run_id``."""
    model_id = tracker.find_logged_model({"config_hash": info["config_hash"]})
    if model_id is not None or not tracker.log_models:
        return model_id
    params = {f"model.{k}": v for k, v in info["model"].items()}
    params.update({f"train.{k}": v for k, v in info["train"].items()})
    with tempfile.TemporaryDirectory(prefix="model-") as tmp:
        model_dir = save_pyfunc(VariantFiles(folder).translator_files(), Path(tmp) / "model")
        return tracker.log_model(
            run_id,
            folder.name,
            model_dir,
            step=int(info.get("best_step") or 0),
            params=params,
            tags={"config_hash": info["config_hash"], "variant": folder.name},
        )


def variant_params(info: dict, axes: list[str]) -> dict[str, Any]:
    """A variant's values of the study's grid ``axes`` and its seed, under the names its
    training run logs them with (``model.scorer``, ``train.seed``): the columns that tell
    the test runs apart (a variant of a ``grid_include`` entry has them too)."""
    values = {}
    for key in {"seed", *axes}:
        section = "model" if key in info["model"] else "train"
        value = info["axes"].get(key, info[section].get(key))
        values[f"{section}.{key}"] = value
    return dict(sorted(values.items()))
