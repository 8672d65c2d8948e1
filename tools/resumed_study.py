"""Write ``benchmarks/results/first_run/study_resumed.json`` from the logs of a study run
as several ``make study`` runs in one fresh clone, each resumed after an interruption.

Each run (a *segment*) leaves two records in ``--logs``: a line of ``segments.jsonl`` when
it starts (``segment``, ``start`` in epoch seconds, ``cpu``, ``cores``, ``flags``,
``commit``) and one when it ends (``segment``, ``end``, ``rc``), and ``segment-N.log``,
its output with every line prefixed by the epoch second it was written. A stage's time in
a segment runs from its ``Running stage '<name>'`` line to the next stage's line, or to the
segment's end; ``setup`` is the time before the first stage (``make setup`` and DVC's
start). The variants and their precision come from the clone's ``reports/summary.csv``.
The README's ``make study`` row sums them (``python -m tools.first_run
--update-readme``).

    python -m tools.resumed_study --logs /work/rerun-logs --clone /work/rerun
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline.io import write_json

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "first_run" / "study_resumed.json"
STAGE = re.compile(r"^(\d+) Running stage '([^']+)'")
STAMP = re.compile(r"^(\d+) ")


def isa(flags: str) -> str:
    """The instruction sets a CPU's flags name, as the README says them."""
    have = set(flags.split())
    if "amx_tile" in have:
        return "AVX-512 and AMX"
    if "avx512f" in have:
        return "AVX-512"
    return "AVX2 only" if "avx2" in have else "no AVX2"


def segment_stages(log: Path, start: float, end: float | None) -> dict[str, float]:
    """Seconds per stage (and ``setup``) of one segment's stamped log."""
    marks: list[tuple[str, float]] = [("setup", start)]
    last = start
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        stamp = STAMP.match(line)
        if stamp:
            last = float(stamp.group(1))
        stage = STAGE.match(line)
        if stage:
            marks.append((stage.group(2), float(stage.group(1))))
    finish = end if end is not None else last
    times: dict[str, float] = {}
    for (name, begin), (_, after) in zip(marks, [*marks[1:], ("end", finish)]):
        if after > begin:
            times[name] = times.get(name, 0.0) + after - begin
    return times


def build(logs: Path, clone: Path) -> dict[str, Any]:
    """The record of the study run whose segments ``logs`` holds, in ``clone``."""
    starts: dict[int, dict[str, Any]] = {}
    ends: dict[int, dict[str, Any]] = {}
    for line in (logs / "segments.jsonl").read_text().splitlines():
        entry = json.loads(line)
        (starts if "start" in entry else ends)[entry["segment"]] = entry
    if not starts:
        raise SystemExit(f"error: {logs}/segments.jsonl: no segment")
    segments = []
    for number in sorted(starts):
        begun, ended = starts[number], ends.get(number, {})
        log = logs / f"segment-{number}.log"
        stages = segment_stages(log, begun["start"], ended.get("end"))
        segments.append(
            {
                "start": begun["start"],
                "end": ended.get("end"),
                "revision": begun["commit"],
                "cpu": begun["cpu"],
                "isa": isa(begun["flags"]),
                "stages_s": {k: round(v, 1) for k, v in stages.items()},
                "ended": "finished" if ended.get("rc") == 0 else f"exit {ended.get('rc')}",
            }
        )
    first = starts[min(starts)]
    # what the study trained, as its report lists it: the variants and their numerics
    trained = pd.read_csv(clone / "reports" / "summary.csv")
    return {
        "what": "The default study from a fresh clone, run as `make study` again in the same "
        "clone after each interruption: finished variants are cached, an unfinished one "
        "resumes from its last checkpoint, so work since that checkpoint is done again and "
        "counted.",
        "how": "python -m tools.resumed_study: each segment's start and end from "
        "segments.jsonl, stage boundaries from the stamped 'Running stage' lines.",
        "revision": first["commit"],
        "final_revision": starts[max(starts)]["commit"],
        "variants": len(trained),
        "environment": {
            "cpu": first["cpu"],
            "cpus": first["cores"],
            "isa": isa(first["flags"]),
            "machines": sorted({f"{s['cpu']} ({s['isa']})" for s in segments}),
            "precision": "/".join(sorted(set(trained.train_precision.astype(str)))),
        },
        "segments": segments,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, required=True)
    parser.add_argument("--clone", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    record = build(args.logs, args.clone)
    write_json(args.out, record)
    total = sum(sum(s["stages_s"].values()) for s in record["segments"])
    print(f"wrote {args.out}: {len(record['segments'])} segment(s), {total / 3600:.2f} h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
