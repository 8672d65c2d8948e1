"""Per-stage wall times of a ``dvc repro`` from its console log.

DVC prints ``Running stage 'X':`` when a stage starts (``Stage 'X' didn't change,
skipping`` when it is cached); the stages log lines that start with ``HH:MM:SS``
(possibly behind a Ray prefix such as ``(run_trial pid=123) `` or a date, as Ray's and
MLflow's own lines have). A stage's wall time
runs from its first timestamp to the next stage's first timestamp (the last stage: to
its own last timestamp), so DVC's own bookkeeping between stages is included and the
seconds before a stage's first log line are not. Timestamps have one-second resolution;
a run across midnight is unwrapped. When the log ends with the report of GNU
``/usr/bin/time -v dvc repro``, its elapsed wall time and maximum RSS are read too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

STAGE_START = re.compile(r"^Running stage '([^']+)'")
STAGE_SKIPPED = re.compile(r"^Stage '([^']+)' didn't change, skipping")
TIMESTAMP = re.compile(
    r"^(?:\([^)]*pid=\d+[^)]*\)\s+)?(?:\d{4}[-/]\d{2}[-/]\d{2}[ T])?(\d{2}):(\d{2}):(\d{2})\b"
)
ELAPSED = re.compile(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)")
MAX_RSS = re.compile(r"Maximum resident set size \(kbytes\): (\d+)")
DAY = 24 * 3600


def _seconds(match: re.Match[str]) -> int:
    hours, minutes, seconds = (int(part) for part in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def parse_study_log(path: str | Path) -> dict[str, Any]:
    """``{"stages": [{"stage", "status", "seconds"}...], "total_seconds", ...}`` of a log.

    ``status`` is ``ran`` or ``skipped``; ``seconds`` is None for a stage that ran but
    logged no timestamp.
    """
    stages: list[dict[str, Any]] = []
    times: dict[str, list[int]] = {}
    current, previous, offset = None, None, 0
    result: dict[str, Any] = {"log": str(path), "stages": stages}
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        if elapsed := ELAPSED.search(line):
            parts = [float(part) for part in elapsed.group(1).split(":")]
            result["time_elapsed_seconds"] = sum(p * 60**i for i, p in enumerate(reversed(parts)))
        elif max_rss := MAX_RSS.search(line):
            result["time_max_rss_mib"] = int(max_rss.group(1)) / 1024
        elif started := STAGE_START.match(line):
            current = started.group(1)
            stages.append({"stage": current, "status": "ran", "seconds": None})
            times[current] = []
        elif skipped := STAGE_SKIPPED.match(line):
            stages.append({"stage": skipped.group(1), "status": "skipped", "seconds": 0.0})
        elif current is not None and (stamp := TIMESTAMP.match(line)):
            value = _seconds(stamp) + offset
            if previous is not None and value < previous - DAY / 2:  # past midnight
                offset += DAY
                value += DAY
            times[current].append(value)
            previous = max(value, previous or value)
    ran = [s for s in stages if s["status"] == "ran" and times[s["stage"]]]
    for stage, following in zip(ran, ran[1:] + [None]):
        start = min(times[stage["stage"]])
        end = min(times[following["stage"]]) if following else max(times[stage["stage"]])
        stage["seconds"] = float(end - start)
    result["total_seconds"] = None
    if ran:
        result["total_seconds"] = float(max(times[ran[-1]["stage"]]) - min(times[ran[0]["stage"]]))
    return result
