"""pipeline.runtime.allocator: large blocks come from the heap (reused after free), not from a
fresh mapping per allocation."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support import REPO_ROOT

# A fresh process allocates 20 MiB and says whether it lies in the [heap] (brk) region;
# glibc's own settings map a block of that size on its own (threshold 128 KiB at start)
PROBE = """
import json, torch
from pipeline.runtime.allocator import tune_allocator
tuned = tune_allocator()
address = torch.empty(5 * 1024 * 1024).data_ptr()
heap = [line.split()[0].split("-") for line in open("/proc/self/maps")
        if line.rstrip().endswith("[heap]")]
inside = any(int(a, 16) <= address < int(b, 16) for a, b in heap)
print(json.dumps({"tuned": tuned, "in_heap": inside}))
"""


def _probe(setting: str) -> dict:
    env = {**os.environ, "ATTENTION_STUDY_MALLOC": setting, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc settings: Linux only")
def test_tuned_allocator_serves_large_blocks_from_the_heap():
    default, tuned = _probe("default"), _probe("tuned")
    assert default == {"tuned": False, "in_heap": False}
    assert tuned == {"tuned": True, "in_heap": True}


def test_tuning_is_idempotent():
    from pipeline.runtime.allocator import tune_allocator

    assert tune_allocator() == tune_allocator()
