"""A real ``mlflow server`` on 127.0.0.1 goes away mid-sweep: training never waits for it,
the sweep says so once and again when it is back, and every record reaches MLflow once:
in the same run after a short outage, in the next one after an outage that outlasts it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from mlflow.tracking import MlflowClient

from pipeline.tracking.outbox import pending_journals
from tests.support import (
    CLEARED_ENV,
    REPO_ROOT,
    last_sweep,
    make_project,
    tiny_infra,
    train_args,
    write_params,
)
from tools.mlflow_ui import free_port


class Server:
    """``mlflow server`` on a fixed 127.0.0.1 port, so it can come back where it was."""

    def __init__(self, root: Path):
        self.root, self.port = root, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 120) -> None:
        command = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{self.root / 'server.db'}",
            "--artifacts-destination",
            str(self.root / "server-artifacts"),
        ]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "mlflow server exited"
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"mlflow server on {self.url} not up after {timeout:.0f} s")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


def _train(root: Path, params: Path, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
    env.update(PYTHONPATH=str(REPO_ROOT), RAY_DEDUP_LOGS="0")
    command = [sys.executable, "-m", "stages.train", "--params", str(params), *train_args(root)]
    return subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("w")
    )


def _wait_for(condition, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _metrics_recorded(root: Path) -> bool:
    journals = (root / ".study_cache" / "tracking").glob("*/records.jsonl")
    return any('"op": "metrics"' in path.read_text() for path in journals)


def _check_runs(url: str, root: Path, variants: list[str]) -> None:
    """Each variant's train run is FINISHED with every evaluation step exactly once."""
    client = MlflowClient(url)
    experiment = client.get_experiment_by_name("test")
    found = client.search_runs([experiment.experiment_id], "tags.kind = 'train'")
    by_variant = {run.data.tags["variant"]: run for run in found}
    for variant in variants:
        assert sum(r.data.tags["variant"] == variant for r in found) == 1, variant
        run = by_variant[variant]
        assert run.info.status == "FINISHED", (variant, run.info.status)
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "dev_loss")]
        history = (root / "models" / variant / "history.csv").read_text().splitlines()
        assert sorted(steps) == sorted(set(steps)), f"{variant}: a step logged twice: {steps}"
        assert len(steps) == len(history) - 1, (variant, steps)


def test_an_mlflow_server_outage_never_stalls_training_and_loses_nothing(tmp_path):
    root = tmp_path / "project"
    params = make_project(
        root, max_epochs=4, grid={"scorer": ["none", "additive"], "hidden_size": [16]}
    )
    server = Server(tmp_path)
    tracking = {"uri": server.url, "outage_wait_seconds": 120}  # outlasts a restart
    write_params(root / "infra.yaml", tiny_infra(root, tracking=tracking))
    server.start()
    try:
        # a short outage: the server is back before the sweep ends
        log = tmp_path / "first.log"
        train = _train(root, params, log)
        _wait_for(lambda: _metrics_recorded(root), "the first metrics")
        server.kill()
        _wait_for(lambda: "is unreachable" in log.read_text(), "the outage message")
        server.start()
        assert train.wait(timeout=900) == 0, log.read_text()[-3000:]
        text = log.read_text()
        assert text.count("is unreachable") == 1 and text.count("is back after") == 1, text
        # one whole line when it goes, one when it comes back; the HTTP client's retries
        # are in the run log, not on the terminal
        outage = [line for line in text.splitlines() if "MLflow at" in line]
        assert len(outage) == 2 and "training goes on" in outage[0], outage
        assert "Retrying" not in text and "urllib3" not in text, text[-3000:]
        assert last_sweep(root)["tracking_records_kept"] == 0
        assert not pending_journals(root / ".study_cache")
        first = sorted(last_sweep(root)["variants"])
        _check_runs(server.url, root, first)

        # an outage that outlasts the sweep: its records wait for the next run
        write_params(params, _with_seed(params, 2))
        tracking["outage_wait_seconds"] = 5  # the sweep ends before the server is back
        write_params(root / "infra.yaml", tiny_infra(root, tracking=tracking))
        log = tmp_path / "second.log"
        train = _train(root, params, log)
        _wait_for(lambda: _metrics_recorded(root), "the first metrics")
        server.kill()
        assert train.wait(timeout=900) == 0, log.read_text()[-3000:]
        text = log.read_text()
        assert text.count("is unreachable") == 1 and "tracking records are kept" in text, text
        assert "waiting up to 5 s" in text, text
        kept = last_sweep(root)["tracking_records_kept"]
        assert kept > 0 and pending_journals(root / ".study_cache")
        second = [v for v in sorted(last_sweep(root)["variants"]) if v not in first]
        assert len(second) == 2
        assert all(last_sweep(root)["variants"][v]["source"] == "trained" for v in second)

        server.start()
        sync = subprocess.run(
            [sys.executable, "-m", "pipeline.tracking.outbox", "--params", str(params)],
            cwd=REPO_ROOT,
            env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert sync.returncode == 0, sync.stderr[-3000:]
        assert not pending_journals(root / ".study_cache")
        _check_runs(server.url, root, first + second)
    finally:
        server.kill()


def _with_seed(params: Path, seed: int) -> dict:
    import yaml

    sections = yaml.safe_load(params.read_text())
    sections["train"]["grid"]["seed"] = [seed]
    return sections
