"""pipeline.runtime.onednn: a process that sized oneDNN's primitive cache builds each bf16
product shape once; one left at oneDNN's default (1024) rebuilds shapes it evicted.

Counted, not timed: oneDNN reports each primitive it builds (``create:cache_miss``) under
``ONEDNN_VERBOSE=profile_create``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support import REPO_ROOT

SHAPES = 1100  # more distinct products than oneDNN's default 1024 slots
PROBE = f"""
import json, os, sys
from pipeline.runtime.onednn import size_primitive_cache
if sys.argv[1] == "sized":
    size_primitive_cache()
import torch
torch.set_num_threads(1)
w = torch.ones(16, 16, dtype=torch.bfloat16)
x = torch.ones({SHAPES}, 16, dtype=torch.bfloat16)
for sweep in range(2):
    print("sweep", sweep, flush=True)
    for rows in range(1, {SHAPES} + 1):
        torch.mm(x[:rows], w)
print(json.dumps({{"capacity": os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY")}}))
"""


def _builds(mode: str, extra_env: dict[str, str] | None = None) -> tuple[list[int], dict]:
    """Primitives built in each of the two sweeps over the same shapes, and the probe's
    report."""
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    env.update(
        {"ONEDNN_VERBOSE": "profile_create", "PYTHONPATH": str(REPO_ROOT)}, **(extra_env or {})
    )
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        env=env,
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    builds, sweep = [0, 0], -1
    for line in out.splitlines():
        if line.startswith("sweep "):
            sweep = int(line.split()[1])
        elif "create:cache_miss" in line and ",matmul," in line:
            builds[sweep] += 1
    return builds, json.loads(out.splitlines()[-1])


def test_sized_cache_builds_each_shape_once_and_the_default_rebuilds():
    default, report = _builds("default")
    if default[0] == 0:
        pytest.skip("this CPU runs bf16 products without oneDNN primitives: nothing to cache")
    assert report == {"capacity": None}
    assert default[0] > 1024  # more primitives than the default cache holds
    assert default[1] >= default[0] - 1024  # the evicted ones are built again
    sized, report = _builds("sized")
    assert report == {"capacity": "8192"}
    assert sized[0] == default[0]
    assert sized[1] == 0


def test_a_capacity_the_user_exported_is_kept():
    builds, report = _builds("sized", {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "16"})
    assert report == {"capacity": "16"}
    if builds[0]:
        assert builds[1] >= builds[0] - 16
