"""Rebuild ``data/decoded_before.txt``: every test sentence an earlier committed study of
this repository decoded, so that the next study's test set holds none of them
(``fetch.split.exclude_from_test``).

Each fetch output ever locked in ``dvc.lock`` (one per distinct ``data/raw`` hash in the
file's git history) is rebuilt by running that commit's own ``inputs`` and ``fetch``
stage commands in a temporary git worktree; the rebuilt folder must have the hash the
lock recorded (DVC's directory hash), or the tool stops. The union of their
``test.tsv`` source sentences, sorted, is written with a header naming each commit.

    python -m tools.decoded_before [--out data/decoded_before.txt] [--upto REV]

``--upto``: only the history up to ``REV`` (default ``HEAD``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from pipeline.io import atomic_path

logger = logging.getLogger("tools.decoded_before")
ROOT = Path(__file__).resolve().parent.parent
STAGES = ("inputs", "fetch")
"""The stages whose commands rebuild ``data/raw`` (``inputs`` where the commit has it)."""


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=120
    ).stdout


def locked_fetches(upto: str) -> list[tuple[str, str]]:
    """``(commit, data/raw hash)`` for each distinct fetch output locked in ``dvc.lock``
    up to ``upto``, at the earliest commit that locked it, oldest first."""
    first: dict[str, str] = {}
    for commit in git("log", "--format=%H", "--reverse", upto, "--", "dvc.lock").split():
        try:
            lock = yaml.safe_load(git("show", f"{commit}:dvc.lock")) or {}
        except subprocess.CalledProcessError:
            continue  # the commit deleted it
        for out in lock.get("stages", {}).get("fetch", {}).get("outs", []):
            if out.get("path") == "data/raw" and out.get("md5"):
                first.setdefault(out["md5"], commit)
    return [(commit, digest) for digest, commit in first.items()]


def dir_hash(folder: Path) -> str:
    """DVC's hash of a directory: the MD5 of its sorted ``{md5, relpath}`` list as JSON."""
    entries = [
        {
            "md5": hashlib.md5(path.read_bytes()).hexdigest(),
            "relpath": path.relative_to(folder).as_posix(),
        }
        for path in sorted(p for p in folder.rglob("*") if p.is_file())
    ]
    entries.sort(key=lambda e: e["relpath"])
    return hashlib.md5(json.dumps(entries, sort_keys=True).encode()).hexdigest() + ".dir"


def rebuild(commit: str, digest: str, scratch: Path) -> list[str]:
    """The test sources of ``commit``'s fetch output, rebuilt and checked against
    ``digest``."""
    tree = scratch / commit[:12]
    git("worktree", "add", "--detach", "--force", str(tree), commit)
    try:
        stages = yaml.safe_load((tree / "dvc.yaml").read_text())["stages"]
        for name in STAGES:
            if name in stages:
                command = shlex.split(stages[name]["cmd"])
                if command[0] == "python":
                    command[0] = sys.executable
                subprocess.run(command, cwd=tree, check=True, capture_output=True, timeout=900)
        raw = tree / "data" / "raw"
        rebuilt = dir_hash(raw)
        if rebuilt != digest:
            raise SystemExit(
                f"error: {commit[:12]}: rebuilt data/raw hashes {rebuilt}, dvc.lock says {digest}"
            )
        lines = (raw / "test.tsv").read_text(encoding="utf-8").splitlines()
        return [line.split("\t", 1)[0] for line in lines if line]
    finally:
        git("worktree", "remove", "--force", str(tree))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "decoded_before.txt")
    parser.add_argument("--upto", default="HEAD")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    fetches = locked_fetches(args.upto)
    sources: set[str] = set()
    header = []
    with tempfile.TemporaryDirectory(prefix="decoded-before-") as scratch:
        for commit, digest in fetches:
            test = rebuild(commit, digest, Path(scratch))
            sources.update(test)
            when = git("show", "-s", "--format=%cs", commit).strip()
            header.append(f"# {commit[:12]} ({when}): data/raw {digest}, {len(test)} test pairs")
            logger.info(
                "%s: %d test pairs (data/raw %s, rebuilt and matched)",
                commit[:12],
                len(test),
                digest,
            )
    with atomic_path(args.out) as path:
        path.write_text(
            "# Test source sentences of every fetch output locked in dvc.lock's history, rebuilt\n"
            "# at each commit and checked against its hash (python -m tools.decoded_before):\n"
            + "\n".join(header)
            + f"\n# {len(sources)} distinct sentences\n"
            + "".join(f"{s}\n" for s in sorted(sources)),
            encoding="utf-8",
        )
    logger.info(
        "wrote %s: %d sentences from %d locked fetch outputs", args.out, len(sources), len(fetches)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
