"""Run benchmark trials in worker processes (``benchmarks.worker``), alone or at once.

Each trial is a fresh ``python -m benchmarks.worker`` with ``OMP_NUM_THREADS`` and
``MKL_NUM_THREADS`` set to its thread count. Trials run at once are started together:
every worker does its setup and warm-up, prints ``READY`` and waits; when all are ready
each gets its go line, so their timed windows overlap. ``overlap`` (in the results) is
the shared part of the windows over the longest window.

Every result also says how busy the machine was with other work meanwhile:
``other_load`` = (CPU-seconds the whole machine was busy, from ``/proc/stat``, minus
the CPU-seconds of our own processes) / (wall seconds x cores), and ``steal`` = the
hypervisor's steal time on the same scale. A trial with ``other_load`` above a few
percent shared the machine with something else and reads low.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger("benchmarks.trials")
ROOT = Path(__file__).resolve().parents[1]
"""The repository root (the workers run there)."""


def machine_cpu_seconds() -> tuple[float, float]:
    """(busy, steal) CPU-seconds of all cores since boot, from ``/proc/stat``."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values
    ticks = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / ticks, steal / ticks


def own_cpu_seconds() -> float:
    """CPU-seconds of this process and its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass(frozen=True)
class LoadWindow:
    """From :meth:`open` to :meth:`shares`: the share of the machine's cores that other
    processes kept busy (``other_load``) and the hypervisor's steal, on the same scale."""

    busy: float
    steal: float
    own: float
    start: float

    @classmethod
    def open(cls) -> LoadWindow:
        busy, steal = machine_cpu_seconds()
        return cls(busy, steal, own_cpu_seconds(), time.perf_counter())

    def shares(self) -> tuple[float, float]:
        """(other_load, steal) since the window opened."""
        capacity = (time.perf_counter() - self.start) * (os.cpu_count() or 1)
        busy, steal = machine_cpu_seconds()
        other = busy - self.busy - (own_cpu_seconds() - self.own)
        return max(0.0, other) / capacity, (steal - self.steal) / capacity


def other_load(seconds: float = 1.0) -> float:
    """Share of the machine's cores busy with other processes over ``seconds``."""
    window = LoadWindow.open()
    time.sleep(seconds)
    return window.shares()[0]


def cpu_model() -> str:
    """The CPU's model name."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def _start(spec: dict[str, Any], wait: bool) -> subprocess.Popen:
    threads = str(spec.get("threads", 1))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    command = [sys.executable, "-m", "benchmarks.worker", json.dumps({**spec, "wait": wait})]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )


def _collect(spec: dict[str, Any], process: subprocess.Popen) -> dict[str, Any]:
    output, _ = process.communicate()
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    if process.returncode or not lines:
        raise RuntimeError(f"benchmark worker exited with {process.returncode}: {spec}")
    return {**spec, **json.loads(lines[-1].removeprefix("RESULT "))}


def run_trials(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run ``specs`` at once, one process each, once; each result is its spec plus its
    numbers (see :class:`TrialRunner` for waiting out other work)."""
    wait = len(specs) > 1
    window = LoadWindow.open()
    processes = [_start(spec, wait) for spec in specs]
    try:
        if wait:
            for process in processes:
                if process.stdout.readline().strip() != "READY":
                    raise RuntimeError(f"a benchmark worker failed before its timing: {specs}")
            for process in processes:
                process.stdin.write("go\n")
                process.stdin.flush()
        results = [_collect(spec, process) for spec, process in zip(specs, processes)]
    finally:
        for process in processes:  # only left running when something failed
            if process.poll() is None:
                process.kill()
                process.wait()
    load, steal = window.shares()
    for result in results:
        result["other_load"], result["steal"] = load, steal
    if wait:
        starts = [r["window_start"] for r in results]
        ends = [r["window_end"] for r in results]
        longest = max(end - start for start, end in zip(starts, ends))
        for result in results:
            result["overlap"] = max(0.0, min(ends) - max(starts)) / longest
    return results


@dataclass
class TrialRunner:
    """Runs trials when the machine is quiet: before each trial it waits until other
    processes use at most ``max_other_load`` of the cores, and it repeats a trial whose
    ``other_load`` was higher (keeping the quietest attempt), up to ``attempts`` times.
    Waiting and repeats stop once they have cost ``budget_seconds`` in all; later trials
    run once and carry their ``other_load`` as a flag."""

    max_other_load: float = 0.05
    attempts: int = 3
    budget_seconds: float = 900.0
    spent_seconds: float = 0.0

    def wait_for_quiet(self) -> None:
        start, logged = time.perf_counter(), False
        while other_load(0.5) > self.max_other_load and self.spent_seconds < self.budget_seconds:
            if not logged:
                logger.info("waiting for other processes to leave the cores free")
                logged = True
            time.sleep(2.0)
            self.spent_seconds += 2.5
        if logged:
            logger.info("waited %.0f s", time.perf_counter() - start)

    def run(self, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run ``specs`` at once (see :func:`run_trials`), on a quiet machine if possible."""
        best: list[dict[str, Any]] | None = None
        for attempt in range(1, self.attempts + 1):
            self.wait_for_quiet()
            start = time.perf_counter()
            results = run_trials(specs)
            if best is None or results[0]["other_load"] < best[0]["other_load"]:
                best = results
            if best[0]["other_load"] <= self.max_other_load:
                break
            if attempt == self.attempts or self.spent_seconds >= self.budget_seconds:
                logger.warning(
                    "trial ran beside other work (other load %.0f%%): %s",
                    100 * best[0]["other_load"],
                    specs[0].get("kind"),
                )
                break
            self.spent_seconds += time.perf_counter() - start
        for result in best:
            result["attempts"] = attempt
        return best

    def one(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Run one trial alone."""
        return self.run([spec])[0]
