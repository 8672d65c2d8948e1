"""The README's two commands on a fresh clone, timed: ``make study`` and ``make test``.

Clones the repository (``--rev``, default HEAD) into ``--workdir``, then runs what a new
user runs, in order: ``make setup`` (with ``--setup-args``, e.g. this machine's local
torch wheel), ``make study`` (``dvc repro``: each stage's wall time is read from DVC's
"Running stage" lines as they stream) and ``make test`` (pytest's counts from its JUnit
XML). Writes ``first_run.json`` and ``first_run.md`` to ``--out``; the README's "Two
commands" table quotes them, and a test checks that it does.

    python -m benchmarks.first_run --workdir /tmp/first-run \\
        --setup-args TORCH=local TORCH_SPEC=torch==2.13.0      # about 100 minutes on 2 cores

The clone is left in ``--workdir`` (its study outputs, ``dvc.lock`` and ``.venv``) for
inspection. Pip's cache is whatever the machine has: say so when quoting the setup time.
Not part of the tests.
"""

from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "first_run"
STAGE_LINE = re.compile(r"Running stage '([^']+)'")
logger = logging.getLogger("benchmarks.first_run")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_streamed(command: list[str], cwd: Path, log: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run ``command``, its output to ``log``; the wall time of the whole and of each DVC
    stage (from one "Running stage" line to the next, the last to the end)."""
    start = time.perf_counter()
    marks: list[tuple[str, float]] = []
    with log.open("w", encoding="utf-8") as sink:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, errors="replace", bufsize=1,
        )  # fmt: skip
        assert process.stdout is not None
        for line in process.stdout:
            sink.write(line)
            match = STAGE_LINE.search(line)
            if match:
                marks.append((match.group(1), time.perf_counter() - start))
                logger.info("%s: stage %s at %.1f min", command[-1], match.group(1),
                            marks[-1][1] / 60)  # fmt: skip
        code = process.wait()
    total = time.perf_counter() - start
    ends = [t for _, t in marks[1:]] + [total]
    stages = {name: round(end - begin, 1) for (name, begin), end in zip(marks, ends)}
    return {"command": " ".join(command), "exit_code": code, "wall_s": round(total, 1),
            "stages_s": stages}  # fmt: skip


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
        f"`{' '.join(result['setup_args']) or '(none)'}`. `python -m benchmarks.first_run`.",
        "",
        "| step | exit | minutes |",
        "| --- | ---: | ---: |",
    ]
    for name in ("setup", "study", "test"):
        step = result.get(name)
        if step:
            minutes = step["wall_s"] / 60
            lines.append(f"| `{step['command']}` | {step['exit_code']} | {minutes:.1f} |")
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


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--repo", type=Path, default=ROOT, help="repository to clone")
    cli.add_argument("--rev", default="HEAD")
    cli.add_argument("--workdir", type=Path, required=True, help="an absent or empty folder")
    cli.add_argument("--setup-args", nargs="*", default=[], help="make variables for `make setup`")
    cli.add_argument("--skip-study", action="store_true")
    cli.add_argument("--skip-test", action="store_true")
    cli.add_argument("--out", type=Path, default=OUT)
    args = cli.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    if args.workdir.exists() and any(args.workdir.iterdir()):
        raise SystemExit(f"error: --workdir {args.workdir} is not empty")
    revision = subprocess.run(["git", "rev-parse", args.rev], cwd=args.repo, check=True,
                              capture_output=True, text=True).stdout.strip()  # fmt: skip
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(args.repo), str(args.workdir)],
                   check=True)  # fmt: skip
    subprocess.run(["git", "checkout", "-q", revision], cwd=args.workdir, check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
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

    def save() -> None:
        write_json(args.out / "first_run.json", result)
        write_text(args.out / "first_run.md", render(result))

    setup = ["make", "setup", *args.setup_args]
    result["setup"] = run_streamed(setup, args.workdir, logs / "setup.log", env)
    if result["setup"]["exit_code"]:
        save()
        return 1
    torch_version = subprocess.run(
        [str(args.workdir / ".venv" / "bin" / "python"), "-c",
         "import torch; print(torch.__version__)"],
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    result["environment"]["torch"] = torch_version
    if not args.skip_study:
        result["study"] = run_streamed(["make", "study"], args.workdir, logs / "study.log", env)
        save()
    if not args.skip_test:
        junit = logs / "junit.xml"
        test_env = dict(env, PYTEST_ADDOPTS=f"--junitxml={junit} -p no:cacheprovider")
        result["test"] = run_streamed(["make", "test"], args.workdir, logs / "test.log", test_env)
        if junit.exists():
            result["tests"] = junit_counts(junit)
    save()
    print(render(result))
    failed = any(result.get(k, {}).get("exit_code") for k in ("study", "test"))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
