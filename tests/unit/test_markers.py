"""Test folders and the ``slow`` marker mean the same thing: ``tests/unit`` is what
``-m "not slow"`` runs, ``tests/e2e`` is slow as a whole (its conftest marks it)."""

import subprocess
import sys

from tests.support import REPO_ROOT

SLOW_MARK = "mark." + "slow"  # spelled apart, so this file does not match itself


def _collect(marker: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    return subprocess.run(
        [*command, "-m", marker, "tests/e2e"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_no_unit_test_is_marked_slow():
    unit = (REPO_ROOT / "tests" / "unit").glob("test_*.py")
    marked = [p.name for p in unit if SLOW_MARK in p.read_text()]
    assert not marked, f"slow tests belong in tests/e2e: {marked}"


def test_not_slow_collects_nothing_of_the_end_to_end_folder():
    """Exit status 5 is pytest's "no tests collected" (a collection error would be 2)."""
    fast = _collect("not slow")
    assert fast.returncode == 5, fast.stdout[-2000:] + fast.stderr[-2000:]
    assert "deselected" in fast.stdout, fast.stdout[-2000:]  # there were tests to deselect


def test_every_end_to_end_file_has_its_place_in_the_order():
    """A new end-to-end file is placed in tests/e2e/conftest.py's LONGEST_FIRST by its
    measured time, not left to start last by accident."""
    from tests.e2e.conftest import HERE, LONGEST_FIRST

    files = sorted(p.name for p in HERE.glob("test_*.py"))
    assert sorted(LONGEST_FIRST) == files
