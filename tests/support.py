"""What the tests share: synthetic corpora, params files, a local HTTP server, and a tiny
but real study project (corpus -> fetch -> tokenize) whose stages run as DVC runs them.

No fakes: real files, a real HTTP server on 127.0.0.1, the real stages, Ray, MLflow
(SQLite) and DVC; only sizes shrink."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pipeline.config.grid import validate_grid
from pipeline.config.params import ModelConfig, TrainConfig, read_params
from pipeline.data.fetch import fetch
from pipeline.data.tokenize import tokenize
from pipeline.records.sweep import FINISHED, VariantRecord
from pipeline.records.train import TrainSummary
from pipeline.study.record import BaselineRatio, Family, StudyRecord
from pipeline.sweep.cache import VariantCache
from pipeline.train.callbacks import TrainCallback
from tools.mlflow_ui import free_port

REPO_ROOT = Path(__file__).resolve().parent.parent

_WORDS = (
    "the a of and to in he she it was his her they them said lord god king people land "
    "house son day city went came made gave saw took heard spoke water bread hand"
).split()


def synthetic_pairs(count: int, seed: int = 0, max_words: int = 70) -> list[tuple[str, str]]:
    """Parallel-looking pairs with a wide spread of lengths (target = reversed words)."""
    rng = random.Random(seed)
    pairs = []
    for index in range(count):
        length = 1 + int(rng.random() ** 2 * max_words)
        words = [rng.choice(_WORDS) for _ in range(length)] + [f"w{index}"]
        pairs.append((" ".join(words), " ".join(reversed(words)).upper()))
    return pairs


def write_tsv(path: Path, pairs: list[tuple[str, str]]) -> Path:
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return path


def write_params(path: Path, sections: dict) -> Path:
    path.write_text(yaml.safe_dump(sections, sort_keys=False), encoding="utf-8")
    return path


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep test output clean
        pass


@contextlib.contextmanager
def serve_directory(directory: Path) -> Iterator[str]:
    """Serve ``directory`` over HTTP on 127.0.0.1 (random port); stops on exit."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# ------------------------------------------------------------------- a Ray cluster
def stop_session(process: subprocess.Popen) -> None:
    """End a process started in its own session and every process it started, never
    anything else: SIGTERM, a grace period, then SIGKILL for whatever of it is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=8)


def ray_nodes(address: str, env: dict) -> list[dict]:
    """The nodes of the Ray cluster at ``address``: id, alive, resources."""
    code = (
        "import json, sys, ray; ray.init(address=sys.argv[1], logging_level='ERROR');"
        "print(json.dumps([{'id': n['NodeID'], 'alive': n['Alive'], 'resources': n['Resources']}"
        " for n in ray.nodes()]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, address], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


class RayHead:
    """A Ray head node (``ray start --head --block``) on 127.0.0.1 with token
    authentication, in its own process session so that :meth:`stop` ends it and all it
    started. ``env``: what a driver or another node needs to join it (the token);
    ``address``: ``127.0.0.1:<port>``."""

    def __init__(self, num_cpus: int, temp_dir: Path):
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        self.temp_dir = temp_dir  # short: Ray's socket paths live under it
        command = [
            str(Path(sys.executable).parent / "ray"),
            "start",
            "--head",
            f"--port={self.port}",
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={num_cpus}",
            "--num-gpus=0",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
            "--block",
        ]
        self.process = subprocess.Popen(
            command,
            env=self.environment(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def environment(self) -> dict[str, str]:
        """This process's environment with the cluster's token (for ``subprocess``)."""
        return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | self.env

    def stop(self) -> None:
        stop_session(self.process)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


# ---------------------------------------------------------------- a tiny study project
CLEARED_ENV = (
    "RAY_ADDRESS",
    "MLFLOW_TRACKING_URI",
    "MLFLOW_EXPERIMENT_NAME",
    "STUDY_INFRA",
    "DVC_ROOT",
    "DVC_EXP_NAME",
    "DVC_EXP_BASELINE_REV",
    "STUDY_NETNS",
    "STUDY_NETWORK",
)
"""Settings of the environment a test project must not inherit."""


PLAIN_TRAINING = {
    "early_stopping_metric": "bleu",
    "lr_patience": 0,
    "patience": 3,
    "min_delta": 0.0,
    "min_learning_rate": 0.0,
    "bleu_progress_delta": None,
    "converged_slope": None,
    "max_steps": 0,
    "eval_every_steps": 0,
    "curriculum_steps": 0,
}
"""``train`` keys of the tests' tiny variants: dev evaluations at epoch ends only, no
curriculum, no step cap, and any dev BLEU gain is progress. The default study's stopping
rules are calibrated on its corpus and its thousands of steps (docs/budget.md), not on a
toy corpus trained for a few epochs."""


def tiny_params(root: Path, **train) -> dict:
    """``params.yaml`` of a tiny study under ``root`` (corpus ``root/corpus.tsv``): GRU
    models of hidden size 16, two epochs of :data:`PLAIN_TRAINING`, a grid of none and
    additive in both source orders; ``train`` overrides ``train`` keys."""
    grid = train.pop(
        "grid",
        {"scorer": ["none", "additive"], "reverse_source": [False, True], "hidden_size": [16]},
    )
    return {
        "fetch": {
            "source": "tsv",
            "path": str(root / "corpus.tsv"),
            "split": {
                "dev_size": 30,
                "test_size": 60,
                "test_min_per_bucket": 5,
                "num_buckets": 3,
                "bucket_width": 5,
                "max_train_words": None,
                "exclude_from_test": None,  # the default lists Bible test sentences
            },
        },
        "tokenize": {"vocab_size": 80},
        "model": {"cell": "gru", "embedding_size": 16, "hidden_size": 16, "dropout": 0.0},
        "train": {
            "max_epochs": 2,
            "batch_tokens": 400,
            "dev_bleu_sentences": 10,
            **PLAIN_TRAINING,
            "grid": grid,
            **train,
        },
        "evaluate": {"beam_size": 2, "bootstrap_samples": 50, "attention_examples": 3},
        "report": {"title": "Tiny study"},
    }


def tiny_infra(root: Path, ray: dict | None = None, tracking: dict | None = None) -> dict:
    """``infra.yaml`` of a test project: everything under ``root`` (the default SQLite
    store ``root/mlflow.db``, the variant cache ``root/.study_cache``)."""
    return {
        "ray": {"storage_path": str(root / "ray_results"), "max_failures": 1, **(ray or {})},
        "tracking": {"experiment": "test", **(tracking or {})},
    }


def make_project(root: Path, ray: dict | None = None, plugin: bool = False, **train) -> Path:
    """Write corpus, params and infra.yaml under ``root`` and run fetch and tokenize;
    returns the params file. ``plugin``: the project has the repo's plugin scorer
    (``scorers/cosine.py``, named in params)."""
    root.mkdir(parents=True, exist_ok=True)
    write_tsv(root / "corpus.tsv", synthetic_pairs(400, seed=11, max_words=14))
    write_params(root / "infra.yaml", tiny_infra(root, ray))
    sections = tiny_params(root, **train)
    if plugin:
        (root / "scorers").mkdir(exist_ok=True)
        shutil.copy(REPO_ROOT / "scorers" / "cosine.py", root / "scorers" / "cosine.py")
        sections = {"plugins": ["scorers/cosine.py"], **sections}
    params = write_params(root / "params.yaml", sections)
    config = read_params(params)
    validate_grid(config)
    fetch(config.fetch, root / "data" / "raw")
    tokenize(config.tokenize, root / "data" / "raw", root / "data" / "tok")
    return params


def dvc_repo(root: Path, params: dict, infra: dict):
    """A git + DVC repository of the project at ``root`` as a user's clone has it (code,
    ``dvc.yaml``, plot templates, ignore files, ``params``, ``infra``), not yet committed;
    returns ``sh(*command, timeout=900)``, which runs a command there."""
    for name in ("pipeline", "stages", "scorers"):  # scorers/: the plugin, a train dep
        shutil.copytree(REPO_ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", ".gitignore", ".dvcignore"):
        shutil.copy(REPO_ROOT / name, root / name)
    write_params(root / "params.yaml", params)
    write_params(root / "infra.yaml", infra)
    sh = shell(root)
    assert sh("git", "init", "-q").returncode == 0
    assert sh(sys.executable, "-m", "dvc", "init", "-q").returncode == 0
    shutil.copytree(REPO_ROOT / ".dvc" / "plots", root / ".dvc" / "plots", dirs_exist_ok=True)
    html = sh(sys.executable, "-m", "dvc", "config", "plots.html_template", "plots/offline.html")
    assert html.returncode == 0, html.stderr  # as the repo's .dvc/config: plots drawn offline
    return sh


def shell(root: Path):
    """``sh(*command, timeout=900)``: runs a command in the project at ``root`` with its
    own code on ``PYTHONPATH`` and none of :data:`CLEARED_ENV`."""
    env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
    env["PYTHONPATH"] = str(root)

    def sh(*command, timeout=900, merged=False):
        """``merged``: stderr into stdout, in the order a terminal shows them."""
        streams = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT} if merged else {}
        return subprocess.run(
            command,
            cwd=root,
            env=env,
            capture_output=not merged,
            text=True,
            timeout=timeout,
            **streams,
        )

    return sh


def commit_all(sh, message: str) -> None:
    """Commit everything (DVC experiments need a baseline commit)."""
    assert sh("git", "add", "-A").returncode == 0
    commit = sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)
    assert commit.returncode == 0, commit.stderr


def run_queue(sh, names: list[str], jobs: int = 1, timeout: float = 900) -> str:
    """``dvc queue start -j jobs``, wait (bounded) until none of ``names`` is queued or
    running, stop this repo's workers; returns ``dvc queue status`` plus the logs."""

    def dvc(*args):
        return sh(sys.executable, "-m", "dvc", *args)

    started = dvc("queue", "start", "-j", str(jobs))
    assert started.returncode == 0, started.stderr[-2000:]
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = dvc("queue", "status").stdout
            if all(n in status for n in names) and not re.search(r"\b(Queued|Running)\b", status):
                break
            time.sleep(3)
        return status + "".join(dvc("queue", "logs", n).stdout[-3000:] for n in names)
    finally:
        dvc("queue", "stop")  # only this repo's workers


def stage(
    module: str, params: Path, root: Path, *args: str, timeout: int = 600, extra_env=None, **kw
):
    """Run a stage CLI the way DVC does (a subprocess), with paths under ``root``."""
    command, env = _stage_command(module, params, args, extra_env)
    return subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout, **kw
    )


def _stage_command(module: str, params: Path, args, extra_env) -> tuple[list[str], dict]:
    """A stage CLI's command line and environment: the repo's code on ``PYTHONPATH``,
    none of :data:`CLEARED_ENV`, ``extra_env`` over the rest."""
    env = dict(os.environ, **(extra_env or {}))
    env.update(PYTHONPATH=str(REPO_ROOT), RAY_DEDUP_LOGS="0")
    for key in CLEARED_ENV:
        env.pop(key, None)
    return [sys.executable, "-m", module, "--params", str(params), *args], env


LOOPBACK_HEX = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}
"""127.0.0.1, ::ffff:127.0.0.1 and ::1 as /proc/net/tcp{,6} write them."""


def listeners(pid: int) -> list[str]:
    """The listening TCP sockets (``address:port``, hex as /proc writes them) of the
    network namespace process ``pid`` is in."""
    found = []
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        found += [line.split()[1] for line in lines if line.split()[3] == "0A"]
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc's parent links)."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(stat.parent.name)] = int(fields[1])
    below, frontier = [], [pid]
    while frontier:
        current = frontier.pop()
        children = [p for p, pp in parent.items() if pp == current]
        below += children
        frontier += children
    return below


def watch_ray_ports(process: subprocess.Popen, timeout: float = 300) -> dict:
    """While ``process`` (a stage) runs: its network namespace against this process's,
    and the listeners of its Ray's GCS server's namespace, once the GCS listens."""
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        for pid in descendants(process.pid):
            try:
                name = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            ports = listeners(pid) if name == "gcs_server" else []
            if ports:
                return {
                    "stage_netns": os.readlink(f"/proc/{process.pid}/ns/net"),
                    "own_netns": os.readlink("/proc/self/ns/net"),
                    "ray_listeners": ports,
                    "host_listeners": listeners(os.getpid()),
                }
        time.sleep(0.2)
    return {}


def stage_process(module: str, params: Path, *args: str, extra_env=None) -> subprocess.Popen:
    """:func:`stage` started, not waited for (text pipes for stdout and stderr)."""
    command, env = _stage_command(module, params, args, extra_env)
    return subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def train_args(root: Path) -> list[str]:
    return ["--tok", str(root / "data" / "tok"), "--out", str(root / "models")]


def resumable(root: Path) -> dict[str, str]:
    """``{variant: checkpoint URI}`` recorded for unfinished variants of ``root``'s project."""
    return VariantCache(root / ".study_cache").resumable()


def last_sweep(root: Path) -> dict:
    """What the last train run did (trained/cached/failed, attempts, MLflow run ids)."""
    return json.loads(VariantCache(root / ".study_cache").last_sweep.read_text())


def kill_train_when_resumable(
    params: Path, root: Path, extra_env=None, timeout: float = 300, interrupt: dict | None = None
) -> tuple[list[Path], set[str]]:
    """Run the train stage and SIGKILL its whole process group as soon as one variant
    has finished and another has reported a Tune checkpoint, both in this run (a variant
    finished, or a checkpoint recorded, before it started does not count). Returns the
    variants' folders finished in this run and the ids of the checkpointed, unfinished
    ones. With ``interrupt`` (a dict), send the driver one SIGINT (Ctrl-C) instead, let it
    end by itself, and store its ``returncode`` and ``stderr`` in that dict."""
    earlier = {p.parent for p in (root / "models").glob("*/result.json")}
    recorded = resumable(root)
    env = dict(os.environ, **(extra_env or {}))
    env.update(PYTHONPATH=str(REPO_ROOT))
    for key in CLEARED_ENV:
        env.pop(key, None)
    command = [sys.executable, "-m", "stages.train", "--params", str(params), *train_args(root)]
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE if interrupt is not None else subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    deadline = time.time() + timeout
    finished, checkpointed = [], set()
    try:
        while time.time() < deadline and not (finished and checkpointed):
            every = [p.parent for p in (root / "models").glob("*/result.json")]
            finished = [folder for folder in every if folder not in earlier]
            done = {folder.name for folder in every}
            checkpointed = {
                k
                for k, uri in resumable(root).items()
                if uri and k not in done and uri != recorded.get(k)
            }
            time.sleep(0.05)
        if interrupt is not None:
            process.send_signal(signal.SIGINT)
            _, interrupt["stderr"] = process.communicate(timeout=120)
            interrupt["returncode"] = process.returncode
    finally:
        try:  # the whole session: the driver and the local Ray it started
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:  # all of it ended by itself
            pass
        process.wait()
    return finished, checkpointed


def tracked_runs(root: Path, **tags: str):
    """``(client, runs)`` of the project's MLflow store (``root/mlflow.db``, experiment
    ``test``), only the runs whose tags have the given values."""
    from mlflow.tracking import MlflowClient  # heavy: only where a test reads runs

    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("test")
    clauses = " AND ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
    return client, client.search_runs([experiment.experiment_id], filter_string=clauses)


def stages_run(dvc_stdout: str) -> set[str]:
    """The stages a ``dvc repro`` ran, minus ``inputs`` (always run: it rewrites an
    identical record when the corpus is unchanged, and nothing after it reruns)."""
    return set(re.findall(r"Running stage '([\w-]+)'", dvc_stdout)) - {"inputs"}


def needs_browser() -> None:
    """Skip (one line saying why) without a Chromium; with ``REQUIRE_BROWSER=1`` (CI) a
    missing browser fails instead."""
    from tools.browser import find_chromium

    if find_chromium() is not None:
        return
    if os.environ.get("REQUIRE_BROWSER") == "1":
        pytest.fail("REQUIRE_BROWSER=1 but no Chromium found (make browser)")
    pytest.skip("no Chromium for the report's browser check (make browser installs it)")


class Interrupted(Exception):
    """Raised by :class:`InterruptAtEpoch`: a training run killed part way."""


class InterruptAtEpoch(TrainCallback):
    """A training callback that records each evaluation row and raises
    :class:`Interrupted` at the first evaluation of ``epoch`` (a run killed there)."""

    def __init__(self, epoch: int = 2):
        self.epoch, self.seen = epoch, []

    def on_evaluation(self, trainer, row: dict) -> None:
        self.seen.append(row)
        if row["epoch"] == self.epoch:
            raise Interrupted


def train_summary(variant_id: str = "additive-fwd-h16-s1", **fields) -> TrainSummary:
    """A finished variant's training summary with plausible values (``fields`` override)."""
    values = dict(
        variant_id=variant_id,
        best_epoch=2,
        best_step=40,
        best_dev_loss=3.5,
        best_dev_bleu=4.25,
        epochs_run=3,
        steps=60,
        wall_time_s=12.0,
        tokens_per_s=900.0,
        parameter_count=1234,
        precision="fp32",
        stop_reason="early_stopping",
        evaluations=6,
        plateaued=True,
        device="cpu",
        node_id="node",
    )
    return TrainSummary(**{**values, **fields})


def variant_record(
    variant_id: str, scorer: str = "additive", seed: int = 1, model=None, train=None, **summary
) -> VariantRecord:
    """A finished variant's record (``model``/``train``: ModelConfig/TrainConfig fields)."""
    return VariantRecord(
        variant_id,
        FINISHED,
        f"hash-{variant_id}",
        {"scorer": scorer, "seed": seed},
        ModelConfig(**{"scorer": scorer, "hidden_size": 16, **(model or {})}),
        TrainConfig(**{"seed": seed, **(train or {})}),
        train_summary(variant_id, **summary),
    )


def dvc(sh, *args, timeout=900):
    """``python -m dvc <args>`` in the project ``sh`` runs commands in."""
    return sh(sys.executable, "-m", "dvc", *args, timeout=timeout)


def translate_cli(cwd, *args, stdin: str):
    """``python -m pipeline.translate <args>`` in the project at ``cwd``, text on stdin."""
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    command = [sys.executable, "-m", "pipeline.translate", *map(str, args)]
    return subprocess.run(
        command, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=300
    )


def study_record(findings=(), ratio: float | None = None, **changes) -> StudyRecord:
    """A findings record (``eval/findings.json``) under the beam decoding: ``findings``
    (FindingRecord), their family at Bonferroni over their count, the baseline's share
    ``ratio`` beside the paper's; ``changes`` replace any other field."""
    size = max(len(findings), 1)
    base = {
        "main_decoding": "beam",
        "reference": "additive",
        "reference_chosen_on": "mean best dev BLEU",
        "reference_dev_bleu": {"additive": 20.0},
        "excluded_from_confirmatory": (),
        "family": Family(size, "Bonferroni", 0.05, 1 - 0.05 / size),
        "power_from": "an earlier run",
        "bootstrap": "sentences within length strata",
        "baseline_ratio": BaselineRatio(ratio, 13.93 / 21.50, "none over additive"),
        "decoding_dependent": (),
        "findings": {"beam": tuple(findings)},
    }
    return StudyRecord(**{**base, **changes})


def shown_experiments(shown: list, name: str) -> list[dict]:
    """The rows (each experiment's first revision) that ``dvc exp show --json``'s output
    ``shown`` holds for experiment ``name``."""
    return [
        experiment["revs"][0]
        for baseline in shown
        for experiment in baseline.get("experiments") or []
        if experiment.get("name") == name
    ]
