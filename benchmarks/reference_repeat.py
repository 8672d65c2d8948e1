"""Section 3 of ``make bench`` alone, repeated: the pipeline against the per-step reference.

    python -m benchmarks.reference_repeat --rounds 3 --out benchmarks/results/reference_repeat

One ratio from one run moves with the machine's speed from minute to minute (a few
percent on a shared VM); this reruns :func:`benchmarks.run.measure_reference` (each row:
the pipeline right before and right after its reference trial) ``--rounds`` times and
reports every round's speed-up and their median, so a target such as "the Bahdanau wiring
at least 3x the reference" is read from a spread, not from one draw. Same trials, sizes
and options as ``benchmarks.run`` (``--steps``, ``--batch-tokens``, ``--precision``...).
Writes ``<out>/reference.json`` and ``<out>/reference.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from typing import Any

from benchmarks.markdown import table
from benchmarks.run import measure_reference, parse_args, setup_summary
from benchmarks.trials import TrialRunner
from pipeline.io import write_text

logger = logging.getLogger(__name__)


def summarize(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per (scorer, wiring): every round's speed-up (bf16 and fp32) and their medians."""
    rows = []
    for index, first in enumerate(rounds[0]):
        speedups = [r[index]["speedup"] for r in rounds]
        fp32 = [r[index]["speedup_fp32"] for r in rounds]
        rows.append(
            {
                "scorer": first["scorer"],
                "wiring": first["wiring"],
                "hidden_size": first["hidden_size"],
                "speedups": speedups,
                "median_speedup": statistics.median(speedups),
                "speedups_fp32": fp32,
                "median_speedup_fp32": statistics.median(fp32),
            }
        )
    return rows


def render(results: dict[str, Any]) -> str:
    setup = results["setup"]
    rows = [
        [
            r["scorer"],
            r["wiring"],
            r["hidden_size"],
            " / ".join(f"{s:.2f}x" for s in r["speedups"]),
            f"{r['median_speedup']:.2f}x",
            " / ".join(f"{s:.2f}x" for s in r["speedups_fp32"]),
            f"{r['median_speedup_fp32']:.2f}x",
        ]
        for r in results["summary"]
    ]
    header = (
        f"scorer|wiring|hidden|pipeline ({setup['precision']}) / reference, each round|median"
        "|pipeline (fp32) / reference, each round|median"
    )
    lines = [
        "# Pipeline vs per-step reference, repeated",
        "",
        f"{setup['started']}; {len(results['rounds'])} rounds in "
        f"{setup['run_seconds'] / 60:.1f} min; `python -m benchmarks.reference_repeat "
        f"{' '.join(results['argv'])}`. Each round: each row times the pipeline right before "
        "and right after its reference trial (batches of "
        f"{setup['batch_tokens']} target tokens, {setup['warmup_steps']} warm-up + "
        f"{setup['timed_steps']} timed steps, one thread).",
        "",
        *table(header, rows),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    argv = sys.argv[1:] if argv is None else argv
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--rounds", type=int, default=3)
    mine, rest = own.parse_known_args(argv)  # the rest are benchmarks.run's options
    rounds_count, args = mine.rounds, parse_args(rest)
    started, setup = time.perf_counter(), setup_summary(args)
    runner = TrialRunner(args.max_other_load, budget_seconds=args.busy_budget_seconds)
    rounds = []
    for number in range(1, rounds_count + 1):
        logger.info("round %d of %d", number, rounds_count)
        rounds.append(measure_reference(args, runner))
    results = {"setup": setup, "argv": argv, "rounds": rounds}
    results["summary"] = summarize(rounds)
    results["setup"]["run_seconds"] = time.perf_counter() - started
    write_text(args.out / "reference.json", json.dumps(results, indent=1) + "\n")  # atomic
    write_text(args.out / "reference.md", render(results))
    logger.info("wrote %s/reference.{json,md}", args.out)


if __name__ == "__main__":
    main()
