"""`make setup` installs torch the way PyTorch documents it, and the build has no paths
of one machine in it (dry runs: ``make -n`` prints the commands without running them)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.support import REPO_ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


def dry_run(tmp_path, *variables: str) -> list[str]:
    out = subprocess.run(
        [
            "make",
            "-n",
            "--no-print-directory",
            "-C",
            str(REPO_ROOT),
            "setup",
            f"VENV={tmp_path / 'venv'}",
            *variables,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.splitlines()


def torch_install(lines: list[str]) -> str:
    installs = [line for line in lines if "pip install" in line and "--upgrade pip" not in line]
    assert len(installs) == 2 and '-e ".[dev]"' in installs[1], installs  # torch first
    return installs[0]


def test_the_default_setup_takes_the_cpu_wheel_from_pytorchs_index(tmp_path):
    line = torch_install(dry_run(tmp_path))
    assert '"torch"' in line and CPU_INDEX in line


def test_cuda_setup_takes_the_default_wheel(tmp_path):
    line = torch_install(dry_run(tmp_path, "TORCH=cuda"))
    assert '"torch"' in line and "--index-url" not in line


def test_a_pinned_local_torch_uses_pips_own_configuration(tmp_path):
    line = torch_install(dry_run(tmp_path, "TORCH=local", "TORCH_SPEC=torch==2.13.0"))
    assert '"torch==2.13.0"' in line and "--index-url" not in line


def test_the_interpreter_is_a_variable(tmp_path):
    assert dry_run(tmp_path, "PYTHON=python3.11")[0].startswith("python3.11 -m venv ")


def makefile_defaults() -> dict[str, str]:
    text = (REPO_ROOT / "Makefile").read_text()
    return dict(re.findall(r"^(\w+) \?= (.*)$", text, flags=re.M))


def test_no_default_in_the_makefile_is_an_absolute_path():
    defaults = makefile_defaults()
    assert "JOEYNMT_VENV" in defaults and "BASELINE_REV" in defaults
    assert not [k for k, v in defaults.items() if v.strip().startswith("/")]


def test_the_time_to_quality_baseline_is_a_commit_of_this_history():
    """A clone has the default baseline: a commit every clone of main holds (a tag need
    not travel with a clone or a push)."""
    rev = makefile_defaults()["BASELINE_REV"].strip()
    shallow = subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    if shallow.stdout.strip() == "true":
        pytest.skip("a shallow clone holds no history to find BASELINE_REV in")
    found = subprocess.run(
        ["git", "merge-base", "--is-ancestor", rev, "HEAD"], cwd=REPO_ROOT, capture_output=True
    )
    assert found.returncode == 0, f"BASELINE_REV {rev} is not in this branch's history"


def test_ci_lints_what_make_lint_lints_and_requires_the_browser():
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "make lint" in ci and "REQUIRE_BROWSER=1 make test" in ci
