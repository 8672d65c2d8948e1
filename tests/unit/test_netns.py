"""When a stage gives its private Ray a loopback-only network namespace
(:mod:`pipeline.runtime.netns`): only where everything it talks to is local, never with
``STUDY_NETWORK=host``; the re-run stage finds its loopback up. The e2e check (its Ray's
listeners) is tests/e2e/test_sweep.py."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from pipeline.config.infra import load_infra
from pipeline.runtime import netns
from tests.support import REPO_ROOT


@pytest.fixture
def local():
    return load_infra(REPO_ROOT / "params.yaml", REPO_ROOT / "infra.yaml")


def test_a_local_study_needs_no_network(local):
    assert netns.needs_network(local) is None
    file_store = replace(local, tracking=local.tracking.model_copy(update={"uri": "file:///tmp/x"}))
    assert netns.needs_network(file_store) is None


@pytest.mark.parametrize(
    ("part", "change", "said"),
    [
        ("ray", {"address": "auto"}, "Ray cluster"),
        ("tracking", {"uri": "http://127.0.0.1:5000"}, "server (http://)"),
        ("ray", {"storage_path": "s3://bucket/ray"}, "Tune storage is remote"),
    ],
)
def test_a_cluster_a_server_or_remote_storage_keeps_the_hosts_network(local, part, change, said):
    settings = replace(local, **{part: getattr(local, part).model_copy(update=change)})
    assert said in netns.needs_network(settings)


def test_the_stage_is_not_re_run_where_it_must_not_be(local, monkeypatch):
    def refuse(*args):
        raise AssertionError("re-ran the stage")

    monkeypatch.setattr(netns.os, "execve", refuse)
    monkeypatch.delenv(netns.INSIDE, raising=False)
    monkeypatch.setenv(netns.OPT_OUT, "host")
    netns.isolate(local)  # opted out
    monkeypatch.delenv(netns.OPT_OUT)
    server = replace(local, tracking=local.tracking.model_copy(update={"uri": "https://m.example"}))
    netns.isolate(server)  # needs the network
    monkeypatch.setattr(netns, "_unshare", lambda: None)
    netns.isolate(local)  # the system refuses a namespace: runs as before


def test_inside_a_new_namespace_the_loopback_comes_up():
    if netns._unshare() is None:
        pytest.skip("this system refuses unprivileged user and network namespaces")
    code = (
        "import socket; from pipeline.runtime.netns import loopback_up; loopback_up(); "
        "s = socket.socket(); s.bind(('0.0.0.0', 0)); s.listen(); "
        "c = socket.create_connection(('127.0.0.1', s.getsockname()[1]), timeout=5); print('ok')"
    )
    done = subprocess.run(
        ["unshare", *netns.UNSHARE, sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
