"""The compiled additive-energy kernel's build across processes: a build killed midway
leaves no hang behind (real compiler, real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipeline.kernels import native
from tests.support import REPO_ROOT

BUILD = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from pipeline.kernels import native
print(native.describe(), flush=True)
"""


def _build_process(extensions: Path) -> subprocess.Popen:
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(extensions), PYTHONPATH=path)
    env[native.ENV_SWITCH] = "on"
    return subprocess.Popen(
        [sys.executable, "-c", BUILD],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_a_build_killed_midway_does_not_hang_the_next_one(tmp_path):
    """SIGKILL a process in the middle of the kernel's build: torch's lock file stays
    behind, the OS lock dies with its holder; the next process removes the stale file
    (one warning), builds and loads the kernel instead of waiting forever."""
    first = _build_process(tmp_path)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(f"*/{native.TORCH_LOCK}")):  # torch's lock: building
        assert first.poll() is None, first.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "the build never started"
        time.sleep(0.05)
    time.sleep(1.0)  # inside the compiler
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    (stale,) = tmp_path.glob(f"*/{native.TORCH_LOCK}")  # left behind by the killed build
    second = _build_process(tmp_path)
    out, err = second.communicate(timeout=300)  # the bound: a hang fails here
    assert second.returncode == 0, err[-3000:]
    assert out.strip() == "native", err[-3000:]
    assert f"{stale}: a build lock left by a process that is gone" in err
    assert not stale.exists()
