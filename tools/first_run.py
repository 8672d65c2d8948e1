"""The README's two commands on a fresh clone, timed: ``make study`` and ``make test``.

Clones the repository (``--rev``, default HEAD) into ``--workdir``, then runs what a new
user runs, in order: ``make setup`` (with ``--setup-args``, e.g. this machine's local
torch wheel), ``make study`` (``dvc repro``: each stage's wall time is read from DVC's
"Running stage" lines as they stream) and ``make test`` (pytest's counts from its JUnit
XML). ``--steps ... quick`` also times the quick preset (``make study PRESET=quick``:
``params.yaml`` from ``presets/quick.yaml``, then ``dvc repro``). Writes ``<name>.json``
and ``<name>.md`` to ``--out``; the README's "Two commands" table is generated from them
(``--update-readme``) and a test fails when it differs (``--check-readme``).

    python -m tools.first_run --workdir /tmp/first-run \\
        --setup-args TORCH=local TORCH_SPEC=torch==2.13.0      # about 100 minutes on 2 cores
    python -m tools.first_run --workdir /tmp/again --steps setup test quick \\
        --name first_run_tests                                  # the tests again, the quick preset
    python -m tools.first_run --update-readme             # rewrite the README's table

The clone is left in ``--workdir`` (its study outputs, ``dvc.lock`` and ``.venv``) for
inspection. Pip's cache is whatever the machine has: say so when quoting the setup time.
Not part of the tests.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipeline.io import write_json, write_text
from tools.readme_block import sync_block

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "first_run"
STAGE_LINE = re.compile(r"Running stage '([^']+)'")
logger = logging.getLogger("tools.first_run")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def pip_cache_mb() -> int:
    """Size of pip's wheel cache before setup: whether the setup time includes downloads."""
    folder = Path(os.environ.get("PIP_CACHE_DIR", Path.home() / ".cache" / "pip"))
    if not folder.is_dir():
        return 0
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) // 2**20


def run_streamed(command: list[str], cwd: Path, log: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run ``command``, its output to ``log``; the wall time of the whole and of each DVC
    stage (from one "Running stage" line to the next, the last to the end)."""
    start = time.perf_counter()
    marks: list[tuple[str, float]] = []
    with log.open("w", encoding="utf-8") as sink:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
        )
        assert process.stdout is not None
        for line in process.stdout:
            sink.write(line)
            match = STAGE_LINE.search(line)
            if match:
                marks.append((match.group(1), time.perf_counter() - start))
                logger.info(
                    "%s: stage %s at %.1f min", command[-1], match.group(1), marks[-1][1] / 60
                )
        code = process.wait()
    total = time.perf_counter() - start
    ends = [t for _, t in marks[1:]] + [total]
    stages = {name: round(end - begin, 1) for (name, begin), end in zip(marks, ends)}
    return {
        "command": " ".join(command),
        "exit_code": code,
        "wall_s": round(total, 1),
        "stages_s": stages,
    }


def junit_counts(path: Path) -> dict[str, Any]:
    """Counts of pytest's JUnit XML: tests, passed, failed, errors, skipped, and the skip
    reasons with how many tests gave each."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    keys = ("tests", "failures", "errors", "skipped")
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in keys}
    reasons: dict[str, int] = {}
    for case in root.iter("testcase"):
        skipped = case.find("skipped")
        if skipped is not None:
            reason = (skipped.get("message") or "").strip()
            reasons[reason] = reasons.get(reason, 0) + 1
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    counts["skip_reasons"] = dict(sorted(reasons.items(), key=lambda kv: -kv[1]))
    counts["pytest_time_s"] = round(sum(float(s.get("time", 0)) for s in suites), 1)
    return counts


def render(result: dict[str, Any]) -> str:
    env = result["environment"]
    lines = [
        "# The README's two commands on a fresh clone",
        "",
        f"{result['started']} UTC, revision {result['revision'][:12]}, {env['cpu']} "
        f"({env['cpus']} CPUs), Python {env['python']}, setup args "
        f"`{' '.join(result['setup_args']) or '(none)'}`. `python -m tools.first_run`.",
        "",
        "| step | exit | minutes |",
        "| --- | ---: | ---: |",
    ]
    for name in ("setup", "study", "test", "test-fast", "quick"):
        step = result.get(name)
        if step:
            minutes = step["wall_s"] / 60
            label = f"`{step['command']}`" + (" (quick preset)" if name == "quick" else "")
            lines.append(f"| {label} | {step['exit_code']} | {minutes:.1f} |")
    study = result.get("study")
    if study:
        lines += ["", "`make study`, by DVC stage:", "", "| stage | minutes |", "| --- | ---: |"]
        lines += [f"| {k} | {v / 60:.1f} |" for k, v in study["stages_s"].items()]
    tests = result.get("tests")
    if tests:
        lines += [
            "",
            f"`make test`: {tests['passed']} passed, {tests['skipped']} skipped, "
            f"{tests['failures']} failed, {tests['errors']} errors; pytest's own time "
            f"{tests['pytest_time_s'] / 60:.1f} min.",
        ]
        lines += [f"- skipped {n}: {reason}" for reason, n in tests["skip_reasons"].items()]
    return "\n".join(lines) + "\n"


START, END = "<!-- first-run:start -->", "<!-- first-run:end -->"


def _interruptions(count: int) -> str:
    """``1`` -> ``"an interruption"``; ``3`` -> ``"3 interruptions"``."""
    return "an interruption" if count == 1 else f"{count} interruptions"


def _minutes(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min"


STAGES = ("fetch", "tokenize", "train", "evaluate", "report")
"""The DVC stages whose times the README's ``make study`` row quotes."""

RESUMED = "study_resumed.json"
"""A study run interrupted and resumed (``make study`` again in the same clone): its
segments, each with the seconds it spent per stage, from the run's own logs. Where the
folder has one, the README's ``make study`` row quotes it instead of ``first_run.json``."""


def resumed_study(out: Path = OUT) -> tuple[dict[str, Any], dict[str, float]] | None:
    """The resumed run's record and its seconds per stage summed over the segments, or
    None where ``out`` has none."""
    path = out / RESUMED
    if not path.is_file():
        return None
    run = json.loads(path.read_text())
    stages: dict[str, float] = {}
    for segment in run["segments"]:
        for stage, seconds in segment["stages_s"].items():
            stages[stage] = stages.get(stage, 0.0) + seconds
    missing = {"setup", *STAGES} - set(stages)
    if missing:
        raise SystemExit(f"error: {path}: no time for stage(s) {sorted(missing)}")
    return run, stages


def _study_cell(run: dict[str, Any], out: Path) -> str:
    """The ``make study`` row's measurement: a one-shot run (``first_run.json``), or a
    resumed one (:data:`RESUMED`) where there is one."""
    resumed = resumed_study(out)
    if resumed is not None:
        record, stages = resumed
        env = record["environment"]
        segments = len(record["segments"])
        return (
            f"{_minutes(sum(stages.values()))} on a {env['cpus']}-core {env['cpu']} "
            f"({env['isa']}): the {record['variants']}-variant grid, run as {segments} "
            f"`make study` runs (resumed after {_interruptions(segments - 1)}), "
            "their times summed: setup "
            f"{_minutes(stages['setup'])}, fetch + tokenize "
            f"{_minutes(stages['fetch'] + stages['tokenize'])}, train "
            f"{_minutes(stages['train'])}, evaluate {_minutes(stages['evaluate'])}, report "
            f"{_minutes(stages['report'])}"
        )
    env, stages = run["environment"], run["study"]["stages_s"]
    missing = set(STAGES) - set(stages)
    if missing:
        raise SystemExit(f"error: {out}/first_run.json: no time for stage(s) {sorted(missing)}")
    machine = f"{env['cpus']}-core {env['cpu']}"
    setup = run["setup"]["wall_s"]
    before_train = sum(v for k, v in stages.items() if k in ("fetch", "tokenize"))
    cache = env.get("pip_cache_mb")
    warm = "" if cache is None else " (pip's cache warm)" if cache > 100 else " (pip's cache empty)"
    return (
        f"{_minutes(setup + run['study']['wall_s'])} from a fresh clone on a {machine}: setup "
        f"{_minutes(setup)}{warm}, fetch + tokenize {_minutes(before_train)}, "
        f"train {_minutes(stages['train'])}, evaluate {_minutes(stages['evaluate'])}, report "
        f"{_minutes(stages['report'])}"
    )


def _machine(environment: dict[str, Any]) -> str:
    return f"{environment['cpus']}-core {environment['cpu']}"


def _counts(tests: dict[str, Any]) -> str:
    """``597 passed, 26 skipped, 25 of them CUDA tests, 0 failed`` from :func:`junit_counts`."""
    cuda = sum(n for reason, n in tests["skip_reasons"].items() if "CUDA" in reason)
    skipped = f"{tests['skipped']} skipped" + (f", {cuda} of them CUDA tests" if cuda else "")
    return f"{tests['passed']} passed, {skipped}, {tests['failures'] + tests['errors']} failed"


def readme_block(out: Path = OUT) -> str:
    """The README's "Two commands" table: the study from ``first_run.json`` (or from
    :data:`RESUMED` where there is one); the tests and the quick preset from
    ``first_run_tests.json`` where a later run wrote one."""
    run = json.loads((out / "first_run.json").read_text())
    tests_file = out / "first_run_tests.json"  # a later run of setup + test (+ test-fast)
    later = json.loads(tests_file.read_text()) if tests_file.is_file() else {}
    tested = later or run
    for name, source in (("setup", run), ("study", run), ("test", tested)):
        if source.get(name, {}).get("exit_code") != 0:
            raise SystemExit(f"error: {out}: `make {name}` did not succeed; nothing to quote")
    study = _study_cell(run, out)
    study_machine = _machine((resumed_study(out) or (run,))[0]["environment"])
    tested_machine = _machine(tested["environment"])
    where = (
        "on the same machine"
        if tested_machine == study_machine
        else f"from a fresh clone on a {tested_machine}"
    )
    test = f"{_minutes(tested['test']['wall_s'])} {where} ({_counts(tested['tests'])})"
    rows = [
        "| command | what it does | measured |",
        "|---|---|---|",
        "| `make study` | creates `.venv`, installs the project, runs `dvc repro`: fetch, "
        f"tokenize, train, evaluate, report | {study} |",
        "| `make test` | the same setup, then `python -m pytest` on four workers (what CI runs); "
        "the report's browser check runs where Chromium is installed and skips otherwise | "
        + test
        + " |",
    ]
    fast = tested.get("test-fast")
    if fast and fast["exit_code"] == 0 and "tests-fast" in tested:
        rows.append(
            "| `make test-fast` | the unit tests only (no `slow` end-to-end test), what to run "
            f"between edits | {_minutes(fast['wall_s'])} once set up, on the same machine as "
            f"`make test` ({_counts(tested['tests-fast'])}) |"
        )
    quick_file = out / "first_run_quick.json"  # the quick preset timed on its own
    quick_run = json.loads(quick_file.read_text()) if quick_file.is_file() else later
    quick = quick_run.get("quick")
    if quick and quick["exit_code"] == 0:
        machine = _machine(quick_run["environment"])
        where = "the same machine as `make study`" if machine == study_machine else f"a {machine}"
        rows.append(
            "| `make study PRESET=quick` | the quick preset: every stage "
            "on a small grid, unconverged (a try-out) | "
            f"{_minutes(quick['wall_s'])} once set up, on {where} |"
        )
    return "\n".join(rows)


def update_readme(readme: Path, out: Path = OUT, check: bool = False) -> int:
    """Rewrite (or, with ``check``, compare) the block between the first-run markers."""
    return sync_block(
        readme,
        readme_block(out),
        START,
        END,
        check,
        "python -m tools.first_run --update-readme",
    )


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--repo", type=Path, default=ROOT, help="repository to clone")
    cli.add_argument("--rev", default="HEAD")
    cli.add_argument("--workdir", type=Path, help="an absent or empty folder")
    cli.add_argument("--setup-args", nargs="*", default=[], help="make variables for `make setup`")
    cli.add_argument(
        "--steps",
        nargs="+",
        default=["setup", "study", "test"],
        choices=["setup", "study", "test", "test-fast", "quick"],
    )
    cli.add_argument("--name", default="first_run", help="results file name (no suffix)")
    cli.add_argument("--out", type=Path, default=OUT)
    cli.add_argument("--update-readme", action="store_true", help="only rewrite README's table")
    cli.add_argument("--check-readme", action="store_true", help="only check README's table")
    args = cli.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.update_readme or args.check_readme:
        return update_readme(ROOT / "README.md", args.out, check=args.check_readme)
    if args.workdir is None:
        cli.error("--workdir is required to run the steps")
    args.workdir, args.out = args.workdir.resolve(), args.out.resolve()
    if args.workdir.exists() and any(args.workdir.iterdir()):
        raise SystemExit(f"error: --workdir {args.workdir} is not empty")
    revision = subprocess.run(
        ["git", "rev-parse", args.rev], cwd=args.repo, check=True, capture_output=True, text=True
    ).stdout.strip()
    subprocess.run(
        ["git", "clone", "-q", "--no-hardlinks", str(args.repo), str(args.workdir)], check=True
    )
    subprocess.run(["git", "checkout", "-q", revision], cwd=args.workdir, check=True)
    env = {  # a new user's shell: none of this checkout's environment or settings
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "STUDY_INFRA", "RAY_ADDRESS")
        and not k.startswith(("MLFLOW_", "DVC_", "PYTEST_"))
    }
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(ROOT))
    )
    result: dict[str, Any] = {
        "started": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "revision": revision,
        "setup_args": args.setup_args,
        "environment": {
            "cpu": cpu_model(),
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
        },
    }
    logs = args.workdir / "first-run-logs"
    logs.mkdir()
    result["environment"]["pip_cache_mb"] = pip_cache_mb()

    def save() -> None:
        write_json(args.out / f"{args.name}.json", result)
        write_text(args.out / f"{args.name}.md", render(result))

    if "setup" in args.steps:
        setup = ["make", "setup", *args.setup_args]
        result["setup"] = run_streamed(setup, args.workdir, logs / "setup.log", env)
        save()
        if result["setup"]["exit_code"]:
            return 1
        torch_version = subprocess.run(
            [
                str(args.workdir / ".venv" / "bin" / "python"),
                "-c",
                "import torch; print(torch.__version__)",
            ],
            capture_output=True,
            text=True,
        ).stdout.strip()
        result["environment"]["torch"] = torch_version
    if "study" in args.steps:
        result["study"] = run_streamed(["make", "study"], args.workdir, logs / "study.log", env)
        save()
    for step, counts in (("test", "tests"), ("test-fast", "tests-fast")):
        if step not in args.steps:
            continue
        junit = logs / f"{step}.xml"
        test_env = dict(env, PYTEST_ADDOPTS=f"--junitxml={junit} -p no:cacheprovider")
        log = logs / f"{step}.log"
        result[step] = run_streamed(["make", step], args.workdir, log, test_env)
        if junit.exists():
            result[counts] = junit_counts(junit)
        save()
    if "quick" in args.steps:
        quick = ["make", "study", "PRESET=quick"]
        result["quick"] = run_streamed(quick, args.workdir, logs / "quick.log", env)
    save()
    print(render(result))
    steps = ("study", "test", "test-fast", "quick")
    failed = any(result.get(k, {}).get("exit_code") for k in steps)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
