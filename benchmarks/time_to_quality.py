"""Time to quality: dev BLEU against wall-clock minutes, ours beside a peer toolkit.

Trains, for ``--minutes`` each at one thread, the study's additive h256 model and its
no-attention baseline with the trainer of this repo (``pipeline.train.trainer.train_variant``
on ``data/tok``, the default corpus), and JoeyNMT 2.3 on the same train/dev split
(``benchmarks/peer/joeynmt.py``, its own venv: ``bash benchmarks/peer/joeynmt_setup.sh``).
Runs go two at a time (this machine has two cores), so each pair is measured side by
side. Each run records its curve: the trainer's own greedy dev BLEU on the first 300 dev
sentences (detokenized, sacreBLEU) at every evaluation, against minutes since training
started (evaluation time included, for both toolkits; :class:`TimeBudget` ends our runs,
a signal JoeyNMT's). The summary gives how many times sooner than JoeyNMT each additive
run reached dev BLEU 8, and the range the two curves' spacing leaves for that ratio.

    python -m benchmarks.time_to_quality --minutes 12           # about 25 minutes here
    python -m benchmarks.time_to_quality --minutes 12 \
        --set bt3000:batch_tokens=3000,learning_rate=0.0035     # + 2 runs, about 37 minutes
    python -m benchmarks.time_to_quality --minutes 12 --rev REV  # + a baseline revision
    python -m benchmarks.time_to_quality --minutes 2 --no-peer  # a quick look

``--set name:key=value,...`` adds a variant of our trainer with params overridden (e.g.
``--set bt3000:batch_tokens=3000,learning_rate=0.0035``), to measure a change side by
side with the defaults; ``name@additive:...`` (or ``@none``) runs it for that scorer
only. Results: ``benchmarks/results/time_to_quality/``; the summary gives each curve,
the minutes to reach each target (:data:`TARGETS`: the dev BLEU a baseline trainer
reached at the end of its 3rd epoch) and to dev BLEU 8. Not part of the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.trials import ROOT, cpu_model, other_load
from pipeline.io import write_json, write_text
from pipeline.train.callbacks import TrainCallback
from tools.revisions import worktree

logger = logging.getLogger("benchmarks.time_to_quality")
RESULTS = ROOT / "benchmarks" / "results"
TARGETS = {"additive": 17.82, "none": 2.33}
"""Our runs' scorers, and each one's target: the dev BLEU that the reference trainer
(commit ``18c646f``, the Makefile's ``BASELINE_REV``) reached at the end of its 3rd epoch
in the study committed with it (additive-fwd-h256-s1 and the init-only none-fwd-h256-s1,
``models/<id>/history.csv`` of that commit)."""
PEER_BLEU = 8.0
"""The dev BLEU at which ours and the peer are compared (JoeyNMT reaches it in 12 minutes)."""


# ------------------------------------------------------------------------ worker
def worker(spec: dict[str, Any]) -> None:
    """One run of our trainer at one thread; prints one JSON line per dev evaluation."""
    import torch

    from pipeline.config import load_config
    from pipeline.config.grid import Variant, apply_point
    from pipeline.runtime.precision import resolve
    from pipeline.runtime.process import prepare_process
    from pipeline.train.callbacks import OnEvaluation
    from pipeline.train.trainer import train_variant

    torch.set_num_threads(1)
    prepare_process()
    config = load_config(ROOT / "params.yaml")
    overrides = {
        "scorer": spec["scorer"],
        "hidden_size": 256,
        "max_epochs": 1000,
        "patience": 1000,
        "max_steps": 0,
        "min_learning_rate": 0,
        "precision": resolve(config.train.precision, "cpu"),
        **spec.get("overrides", {}),
    }
    axes = {"scorer": spec["scorer"]}
    variant = Variant(spec["name"], *apply_point(config, overrides, where="--set"), axes)

    def report(row: dict[str, Any]) -> None:
        print(json.dumps({"row": row}), flush=True)

    callbacks = [OnEvaluation(report), TimeBudget(60 * spec["minutes"])]
    with tempfile.TemporaryDirectory(prefix="ttq-") as folder:
        result = train_variant(variant, ROOT / "data" / "tok", Path(folder), callbacks=callbacks)
    summary = result.summary
    print(json.dumps({"tokens_per_s": summary.tokens_per_s, "steps": summary.steps}), flush=True)


class TimeBudget(TrainCallback):
    """Stops training (stop reason ``time_limit``; the trainer's final evaluation follows)
    once ``seconds`` of wall clock have passed since training started, evaluations
    included: the clock of the curves, as JoeyNMT's budget counts from its start.

    The origin is the trainer's own: each evaluation row's ``wall_time``; before the first
    evaluation, the first step's end less the time spent in training steps so far."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.origin: float | None = None  # time.perf_counter() at the trainer's time 0

    def on_step(self, trainer, step: int) -> None:
        if self.origin is None:
            self.origin = time.perf_counter() - trainer.progress.total.seconds
        if time.perf_counter() - self.origin >= self.seconds:
            trainer.stop("time_limit")

    def on_evaluation(self, trainer, row: dict[str, Any]) -> None:
        self.origin = time.perf_counter() - row["wall_time"]


# ------------------------------------------------------------------------ driver
def _ours(name: str, scorer: str, minutes: float, overrides: dict[str, Any]) -> dict[str, Any]:
    spec = {"name": name, "scorer": scorer, "minutes": minutes, "overrides": overrides}
    command = [sys.executable, "-m", "benchmarks.time_to_quality", "--worker", json.dumps(spec)]
    return {"name": name, "kind": "ours", "command": command}


def _peer(minutes: float, out: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.peer.joeynmt", "--minutes", str(minutes)]
    return {"name": "joeynmt", "kind": "peer", "command": [*command, "--out", str(out)], "out": out}


def _run_pair(runs: list[dict[str, Any]]) -> None:
    for run in runs:
        logger.info("start %s", run["name"])
        cwd = run.pop("cwd", ROOT)
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(cwd))
        run["process"] = subprocess.Popen(
            run["command"],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    for run in runs:
        process = run.pop("process")
        stdout, stderr = process.communicate()
        returncode = process.returncode
        if run["kind"] == "ours":
            lines = [json.loads(x) for x in stdout.splitlines() if x.startswith("{")]
            rows = [x["row"] for x in lines if "row" in x]
            run["curve"] = [
                {
                    "minutes": r["wall_time"] / 60,
                    "epoch": r["epoch"],
                    "step": r["step"],
                    "dev_bleu": r["dev_bleu"],
                    "tokens_per_s": r["tokens_per_s"],
                }
                for r in rows
            ]
            run.update(next((x for x in lines if "steps" in x), {}))
        else:
            curve_file = run["out"] / "curve.csv"
            run["curve"] = []
            if curve_file.is_file():
                with open(curve_file) as handle:
                    run["curve"] = [
                        {k: float(v) for k, v in row.items()} for row in csv.DictReader(handle)
                    ]
            run["out"] = str(run["out"])
        if not run["curve"]:  # recorded, and the other runs go on: their minutes are kept
            run["error"] = f"no dev evaluation (exit {returncode}): {stderr.strip()[-800:]}"
            logger.error("%s: %s", run["name"], run["error"])
            continue
        logger.info("%s: %d points", run["name"], len(run["curve"]))


def time_to(curve: list[dict[str, Any]], target: float) -> float | None:
    """Minutes at the first evaluation whose dev BLEU reaches ``target`` (None: never)."""
    return next((p["minutes"] for p in curve if p["dev_bleu"] >= target), None)


def crossing_bracket(curve: list[dict[str, Any]], target: float) -> tuple[float, float] | None:
    """(minutes at the point before the first that reaches ``target`` (0 if none), minutes at
    that first point): the curve first reached ``target`` in between. None: never."""
    for i, point in enumerate(curve):
        if point["dev_bleu"] >= target:
            return (curve[i - 1]["minutes"] if i else 0.0), point["minutes"]
    return None


def speedup(peer: list[dict[str, Any]], ours: list[dict[str, Any]], target: float):
    """How many times sooner ``ours`` first reached ``target`` than ``peer``: at the first
    points that reach it, the range the true crossings allow (the peer's earliest over
    ours' latest, the peer's latest over ours' earliest), and by the two curves' monotone
    trends (:func:`trend_time_to`, which a lucky point does not move). None where either
    never did."""
    peer_bracket, ours_bracket = crossing_bracket(peer, target), crossing_bracket(ours, target)
    if peer_bracket is None or ours_bracket is None:
        return None
    (peer_low, peer_high), (ours_low, ours_high) = peer_bracket, ours_bracket
    peer_trend, ours_trend = trend_time_to(peer, target), trend_time_to(ours, target)
    return {
        "at_points": peer_high / ours_high,
        "trend": peer_trend / ours_trend if peer_trend and ours_trend else None,
        "low": peer_low / ours_high,
        "high": peer_high / ours_low if ours_low > 0 else float("inf"),
        "peer": list(peer_bracket),
        "ours": list(ours_bracket),
    }


def trend_time_to(curve: list[dict[str, Any]], target: float) -> float | None:
    """Minutes at the first evaluation where the curve's monotone trend reaches ``target``.

    Dev BLEU of 300 greedy sentences swings by up to 4 points between evaluations
    (README), so a first crossing partly measures evaluation density and luck. The trend
    is the isotonic (non-decreasing, least-squares) fit of dev BLEU over time (scipy's
    ``isotonic_regression``): a peak is pooled with the lower evaluations after it, and a
    sparse curve is not penalised for having few points (as a running mean would be)."""
    from scipy.optimize import isotonic_regression

    if not curve:
        return None
    fitted = isotonic_regression([p["dev_bleu"] for p in curve]).x
    trend = [{**p, "dev_bleu": v} for p, v in zip(curve, fitted)]
    return time_to(trend, target - 1e-9)  # a pooled mean may round just below the target


def parse_sets(values: list[str]) -> dict[str, dict[str, Any]]:
    from pydantic import ValidationError

    from pipeline.config import load_config
    from pipeline.config.grid import apply_point
    from pipeline.config.params import ConfigError

    config = load_config(ROOT / "params.yaml")
    sets = {"defaults": {}}
    for value in values:
        name, _, assignments = value.partition(":")
        overrides = {}
        for item in filter(None, assignments.split(",")):
            key, _, raw = item.partition("=")
            overrides[key] = (
                json.loads(raw) if raw[:1].isdigit() or raw in ("true", "false") else raw
            )
        try:  # unknown keys and bad values fail here, before any run starts
            apply_point(config, overrides, where=f"--set {name}")
        except ConfigError as error:
            raise SystemExit(f"error: {error}") from None
        except ValidationError as error:
            first = error.errors()[0]
            key = ".".join(str(part) for part in first["loc"])
            raise SystemExit(f"error: --set {name}.{key}: {first['msg']}") from None
        only = only_scorer(name)
        if only and only not in TARGETS:
            raise SystemExit(f"error: --set {name}: scorer after @ must be one of {list(TARGETS)}")
        sets[name] = overrides
    return sets


def only_scorer(set_name: str) -> str:
    """The scorer a ``--set name@scorer`` runs for ("" for every scorer)."""
    return set_name.partition("@")[2]


def plan_runs(args, sets: dict[str, dict[str, Any]], tree: Path | None, scratch: Path):
    """Our runs (each ``--set`` for each scorer, the ``--rev`` run beside the defaults) and
    the peer, in the order they go two at a time."""
    runs = []
    for name, overrides in sets.items():
        for scorer in args.scorers:
            if only_scorer(name) not in ("", scorer):
                continue
            runs.append(
                {
                    **_ours(f"{scorer}-{name}", scorer, args.minutes, overrides),
                    "overrides": overrides,
                }
            )
            if tree is not None and name == "defaults":  # the revision's run, beside it
                runs.append(
                    {
                        **_ours(f"{scorer}-rev-{args.rev}", scorer, args.minutes, {}),
                        "overrides": {},
                        "revision": args.rev,
                        "cwd": tree,
                    }
                )
    if not args.no_peer:
        runs.insert(1 if tree is None else len(runs), _peer(args.minutes, scratch / "joeynmt"))
    return runs


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--minutes", type=float, default=12.0)
    cli.add_argument("--no-peer", action="store_true", help="skip JoeyNMT")
    cli.add_argument("--set", action="append", default=[], metavar="NAME:KEY=VALUE,...")
    cli.add_argument("--scorers", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    cli.add_argument(
        "--rev",
        help="also run each scorer with the trainer and params.yaml of this git revision "
        "(e.g. 18c646f, the reference trainer), each paired with today's defaults",
    )
    cli.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="only recompute the summary of an earlier results .json",
    )
    cli.add_argument("--worker", help=argparse.SUPPRESS)
    cli.add_argument("--out", type=Path, default=RESULTS / "time_to_quality" / "time_to_quality")
    args = cli.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return
    if args.render:
        rerender(args.render)
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if not (ROOT / "data" / "tok" / "train.npz").is_file():
        sys.exit("error: data/tok: no tokenized corpus (run `dvc repro tokenize`)")
    raw = [ROOT / "data" / "raw" / f"{name}.tsv" for name in ("train", "dev")]
    missing = [str(path.relative_to(ROOT)) for path in raw if not path.is_file()]
    if missing and not args.no_peer:  # found now, not after the first pairs' minutes
        sys.exit(
            f"error: {missing[0]}: missing; the JoeyNMT peer trains on the raw split "
            "(run `dvc repro fetch`, or pass --no-peer)"
        )
    sets = parse_sets(args.set)
    scratch = Path(tempfile.mkdtemp(prefix="ttq-peer-"))
    with contextlib.ExitStack() as stack:
        tree = None
        if args.rev:  # the revision trains on this tree's data/tok
            tree = stack.enter_context(worktree(args.rev, scratch / f"rev-{args.rev}"))
            (tree / "data").mkdir(exist_ok=True)
            (tree / "data" / "tok").symlink_to(ROOT / "data" / "tok")
        runs = plan_runs(args, sets, tree, scratch)
        idle = other_load(1.0)
        started = time.time()
        targets = dict(TARGETS)
        results = {
            "cpu": cpu_model(),
            "minutes_per_run": args.minutes,
            "command": "python -m benchmarks.time_to_quality " + " ".join(argv or sys.argv[1:]),
            "sets": sets,
            "other_load_before": round(idle, 3),
            "targets": targets,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        for start in range(0, len(runs), 2):
            _run_pair(runs[start : start + 2])
            done = [{k: v for k, v in r.items() if k != "command"} for r in runs[: start + 2]]
            summarize(done, targets)
            results.update(
                date=time.strftime("%Y-%m-%d %H:%M"),
                wall_minutes=round((time.time() - started) / 60, 1),
                complete=start + 2 >= len(runs),
                runs=done,
            )
            save(results, args.out)  # after every pair: a later failure loses nothing
    print(render(results))
    failed = [r["name"] for r in results["runs"] if r.get("error")]
    if failed:
        sys.exit(f"error: {', '.join(failed)}: no dev evaluation (see {args.out}.md)")


def summarize(runs: list[dict[str, Any]], targets: dict[str, float | None]) -> None:
    """Add each run's target and the minutes to it (first crossing, trend) and to
    :data:`PEER_BLEU`; the peer is measured against the additive target."""
    for run in runs:
        scorer = run["name"].split("-")[0]
        target = targets.get(scorer) if run["kind"] == "ours" else targets["additive"]
        run["target"] = target
        run["minutes_to_target"] = time_to(run["curve"], target) if target else None
        run["minutes_to_target_trend"] = trend_time_to(run["curve"], target) if target else None
        run["minutes_to_bleu8"] = time_to(run["curve"], PEER_BLEU)
    peer = next((r for r in runs if r["kind"] == "peer" and r["curve"]), None)
    for run in runs:
        if peer is not None and run["kind"] == "ours" and run["name"].startswith("additive"):
            run["peer_speedup_bleu8"] = speedup(peer["curve"], run["curve"], PEER_BLEU)


def rerender(path: Path) -> None:
    """Recompute the summary of a results file (``--render``) and rewrite both files."""
    results = json.loads(path.read_text())
    summarize(results["runs"], results["targets"])
    save(results, path)


def save(results: dict[str, Any], path: Path) -> None:
    """``path`` .json and .md, each replaced atomically (a rerun or ``--render`` never
    leaves a half-written result)."""
    write_json(path.with_suffix(".json"), results)
    write_text(path.with_suffix(".md"), render(results))


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(results: dict[str, Any]) -> str:
    lines = [
        "# Time to quality",
        "",
        f"{results['date']}, {results['cpu']}; each run {results['minutes_per_run']:g} min at one "
        f"thread, two runs at a time; other load before: {results['other_load_before']:.0%}. "
        f"`{results.get('command', 'python -m benchmarks.time_to_quality')}`.",
        "",
        "| run | target dev BLEU | min to target | min to target (trend) | min to dev BLEU 8 "
        "| tokens/s | best dev BLEU |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in results["runs"]:
        if run.get("error"):
            lines.append(f"| {run['name']} | failed: {run['error'][:200]} | | | | | |")
            continue
        tokens = run.get("tokens_per_s") or (run["curve"][-1].get("target_tokens_per_s"))
        best = max(p["dev_bleu"] for p in run["curve"])
        lines.append(
            f"| {run['name']} | {_fmt(run['target'], 2)} | {_fmt(run['minutes_to_target'])} | "
            f"{_fmt(run.get('minutes_to_target_trend'))} | {_fmt(run['minutes_to_bleu8'])} | "
            f"{_fmt(tokens, 0)} | {best:.2f} |"
        )
    ratios = [
        (r["name"], r["peer_speedup_bleu8"]) for r in results["runs"] if r.get("peer_speedup_bleu8")
    ]
    if ratios:
        lines += [
            "",
            f"Times sooner than JoeyNMT to dev BLEU {PEER_BLEU:g}: its first point "
            "reaching it over ours; the range takes each curve's crossing anywhere "
            "between that point and the one before it (a curve that crossed earlier "
            "and fell back would lie outside it); and by the two curves' monotone "
            "trends:",
            "",
        ]
        for name, ratio in ratios:
            (peer_low, peer_high), (ours_low, ours_high) = ratio["peer"], ratio["ours"]
            lines.append(
                f"- {name}: {ratio['at_points']:.1f}x at the points ({peer_high:.2f} vs "
                f"{ours_high:.2f} min); range {ratio['low']:.1f}x-{ratio['high']:.1f}x (JoeyNMT "
                f"crossed in ({peer_low:.2f}, {peer_high:.2f}], ours in ({ours_low:.2f}, "
                f"{ours_high:.2f}]); by the trends {_fmt(ratio.get('trend'))}x"
            )
    lines += ["", "Curves (minutes: dev BLEU):", ""]
    for run in results["runs"]:
        points = ", ".join(f"{p['minutes']:.1f}: {p['dev_bleu']:.1f}" for p in run["curve"])
        lines.append(f"- **{run['name']}**: {points}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
