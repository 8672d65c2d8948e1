"""Start-up costs of the commands the tests and DVC start again and again, side by side
for two checkouts (``--repo`` and ``--against``) in one run.

    python -m benchmarks.startup                                  # this checkout only
    python -m benchmarks.startup --against /path/to/older/clone   # and a baseline

Each command runs ``--repeats`` times (default 3) in a fresh process, alternating between
the checkouts, on whatever the machine is doing (run it on an idle one); the table gives
the median wall time and, with a baseline, the ratio. Each checkout's commands run with
its own ``.venv`` when it has one. Commands: each stage's ``--help`` (argument parsing;
a stage loads torch, Ray Tune or MLflow only when it runs), the imports the train stage
needs (``pipeline.sweep.driver``, ``mlflow``, ``ray.tune``, ``torch``), and ``dvc repro``
and ``dvc status`` in ``--project`` (a built study, up to date; optional: it runs that
project's own code, so its two columns differ only by the checkouts' environments;
``dvc repro`` reruns the always-run ``inputs`` stage, which rewrites an identical record).
Writes
``<out>/latest.json`` and ``<out>/latest.md``. Not part of the tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from pipeline.io import write_json, write_text

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "startup"
STAGES = ("inputs", "fetch", "tokenize", "train", "evaluate", "report")
IMPORTS = ("pipeline.sweep.driver", "mlflow", "ray.tune", "torch")


def commands(project: Path | None) -> dict[str, tuple[list[str], str | None]]:
    """name -> (argv after the interpreter, working folder: None for the checkout)."""
    out: dict[str, tuple[list[str], str | None]] = {
        f"stages.{s} --help": (["-m", f"stages.{s}", "--help"], None) for s in STAGES
    }
    out |= {f"import {m}": (["-c", f"import {m}"], None) for m in IMPORTS}
    if project is not None:
        out["dvc repro (up to date)"] = (["-m", "dvc", "repro"], str(project))
        out["dvc status"] = (["-m", "dvc", "status"], str(project))
    return out


def python_of(repo: Path) -> str:
    venv = repo / ".venv" / "bin" / "python"
    return str(venv) if venv.is_file() else sys.executable


def timed(repo: Path, argv: list[str], cwd: str | None) -> float:
    env = dict(os.environ, PYTHONPATH=str(Path(cwd) if cwd else repo))
    env["PATH"] = os.pathsep.join([str(Path(python_of(repo)).parent), env.get("PATH", "")])
    start = time.perf_counter()
    done = subprocess.run(
        [python_of(repo), *argv],
        cwd=cwd or repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(argv)} in {cwd or repo}: {done.stderr[-500:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--repo", type=Path, default=ROOT)
    cli.add_argument("--against", type=Path, default=None, help="a baseline checkout")
    cli.add_argument("--project", type=Path, default=None, help="a built, up-to-date study")
    cli.add_argument("--repeats", type=int, default=3)
    cli.add_argument("--out", type=Path, default=OUT)
    args = cli.parse_args(argv)
    if args.repeats < 1:
        cli.error("--repeats: at least 1")
    repos = {"this": args.repo.resolve()}
    if args.against is not None:
        repos["baseline"] = args.against.resolve()
    table: dict[str, dict[str, float]] = {}
    for name, (command, cwd) in commands(args.project).items():
        samples: dict[str, list[float]] = {k: [] for k in repos}
        for _ in range(args.repeats):
            for key, repo in repos.items():  # alternating: drift hits both alike
                samples[key].append(timed(repo, command, cwd))
        table[name] = {k: round(statistics.median(v), 2) for k, v in samples.items()}
        print(name, table[name], flush=True)
    record = {"repos": {k: str(v) for k, v in repos.items()}, "repeats": args.repeats}
    record["median_s"] = table
    write_json(args.out / "latest.json", record)
    header = "| command | this (s) |" + (" baseline (s) | ratio |" if "baseline" in repos else "")
    rows = [header, "|---|---:|" + ("---:|---:|" if "baseline" in repos else "")]
    for name, times in table.items():
        row = f"| `{name}` | {times['this']:.2f} |"
        if "baseline" in times:
            row += f" {times['baseline']:.2f} | {times['this'] / times['baseline']:.2f} |"
        rows.append(row)
    write_text(args.out / "latest.md", "\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
