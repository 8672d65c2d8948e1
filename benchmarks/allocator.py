"""glibc's allocator settings vs the pipeline's (:mod:`pipeline.runtime.allocator`), side by side.

Each round starts two one-thread training workers at once on the same batches, one with
glibc's own settings (``"allocator": "default"``) and one with the pipeline's, and
times the same seconds of both; the rounds alternate which worker starts first. The
summary gives each round's tokens/s, the ratio tuned / default, and the system CPU time
each worker spent (page faults and mappings are system time).

    python -m benchmarks.allocator                      # about 4 minutes here
    python -m benchmarks.allocator --rounds 3 --batch-tokens 1000 3000

Results: ``benchmarks/results/allocator/allocator.{json,md}``. Not part of the tests.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.trials import ROOT, TrialRunner, cpu_model
from pipeline.io import write_json, write_text

logger = logging.getLogger("benchmarks.allocator")
RESULTS = ROOT / "benchmarks" / "results"


def spec(args, wiring: str, batch_tokens: int, allocator: str) -> dict[str, Any]:
    return {
        "kind": "train",
        "implementation": "pipeline",
        "scorer": args.scorer,
        "wiring": wiring,
        "hidden_size": args.hidden_size,
        "embedding_size": args.hidden_size,
        "batch_tokens": batch_tokens,
        "warmup": args.warmup,
        "steps": 24,
        "window_seconds": args.seconds,
        "tok_dir": str(args.tok_dir),
        "seed": 1,
        "threads": 1,
        "precision": args.precision,
        "allocator": allocator,
    }


def measure(args) -> list[dict[str, Any]]:
    runner, rows = TrialRunner(), []
    for wiring in args.wirings:
        for batch_tokens in args.batch_tokens:
            for round_ in range(args.rounds):
                order = ["default", "tuned"] if round_ % 2 == 0 else ["tuned", "default"]
                results = runner.run([spec(args, wiring, batch_tokens, a) for a in order])
                by = {r["allocator"]: r for r in results}
                row = {
                    "wiring": wiring,
                    "batch_tokens": batch_tokens,
                    "round": round_ + 1,
                    "default": by["default"]["tokens_per_s"],
                    "tuned": by["tuned"]["tokens_per_s"],
                    "ratio": by["tuned"]["tokens_per_s"] / by["default"]["tokens_per_s"],
                    "sys_s_default": by["default"].get("system_seconds"),
                    "sys_s_tuned": by["tuned"].get("system_seconds"),
                    "tuned_applied": by["tuned"]["allocator_tuned"],
                    "other_load": max(r["other_load"] for r in results),
                }
                logger.info(
                    "%s %d round %d: %.0f vs %.0f tokens/s (%.3fx)",
                    wiring,
                    batch_tokens,
                    round_ + 1,
                    row["tuned"],
                    row["default"],
                    row["ratio"],
                )
                rows.append(row)
    return rows


def render(results: dict[str, Any]) -> str:
    lines = [
        "# Allocator: glibc's settings vs the pipeline's",
        "",
        f"{results['date']}, {results['cpu']}; `{results['command']}`; {results['scorer']} "
        f"h{results['hidden_size']}, {results['precision']}, one thread per worker, both "
        f"workers at once for {results['seconds']:g} s per round.",
        "",
        "| wiring | batch tokens | round | default tokens/s | tuned tokens/s | tuned / default "
        "| system s default / tuned |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results["rows"]:
        system = "-"
        if r["sys_s_default"] is not None:
            system = f"{r['sys_s_default']:.2f} / {r['sys_s_tuned']:.2f}"
        lines.append(
            f"| {r['wiring']} | {r['batch_tokens']} | {r['round']} | {r['default']:.0f} "
            f"| {r['tuned']:.0f} | {r['ratio']:.3f} | {system} |"
        )
    lines += ["", "Median ratio per case:", ""]
    for case, ratio in results["median_ratio"].items():
        lines.append(f"- {case}: {ratio:.3f}x")
    return "\n".join(lines) + "\n"


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--scorer", default="additive")
    cli.add_argument("--wirings", nargs="+", default=["luong", "bahdanau"])
    cli.add_argument("--batch-tokens", nargs="+", type=int, default=[1000, 3000])
    cli.add_argument("--hidden-size", type=int, default=256)
    cli.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    cli.add_argument("--rounds", type=int, default=2)
    cli.add_argument("--seconds", type=float, default=20.0)
    cli.add_argument("--warmup", type=int, default=8)
    cli.add_argument("--tok-dir", type=Path, default=ROOT / "data" / "tok")
    cli.add_argument("--out", type=Path, default=RESULTS / "allocator" / "allocator")
    args = cli.parse_args()
    rows = measure(args)
    cases: dict[str, list[float]] = {}
    for r in rows:
        cases.setdefault(f"{r['wiring']}, {r['batch_tokens']}-token batches", []).append(r["ratio"])
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu_model(),
        "command": "python -m benchmarks.allocator",
        "scorer": args.scorer,
        "hidden_size": args.hidden_size,
        "precision": args.precision,
        "seconds": args.seconds,
        "rows": rows,
        "median_ratio": {k: statistics.median(v) for k, v in cases.items()},
    }
    write_json(args.out.with_suffix(".json"), results)
    write_text(args.out.with_suffix(".md"), render(results))
    print(render(results))


if __name__ == "__main__":
    main()
