"""A logged variant loads, translates and serves where this project is not installed.

The clean environment is a venv (``python -m venv --without-pip``) whose site-packages
holds a ``.pth`` naming one folder: symlinks to the distributions the model's
``requirements.txt`` names and, transitively, those they require, as installed in the
project's venv (each distribution's files, from its ``RECORD``). That is what
``pip install -r requirements.txt`` would give, without downloading: a third-party
package the model needs and does not name is missing there, and so is the project
(``import pipeline`` fails there, checked first). Commands run from a folder outside
the repo. A real ``--env-manager virtualenv`` (or ``uv``) serve would download and
install torch and about a hundred other packages on every run, and needs pyenv: too slow
for a test, and what it adds is a test of pip, not of the model.

A model logged through a tracking server loads there too, its artifacts fetched through
the server (``mlflow-artifacts:`` URIs, no path of the machine that logged it).

The compiled kernel is turned off on both sides (``ATTENTION_STUDY_NATIVE=off``): its
build is named by torch's folder, which here is a new temporary one on every run, and
the torch path it falls back to is what is compared. The folder's ``conftest`` marks
every test here ``slow``."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pipeline.config.infra import InfraFile, TrackingConfig, resolve
from pipeline.tracking.store import Tracker
from pipeline.translate import Translator
from pipeline.translate.mlflow_model import save_pyfunc
from tests.support import REPO_ROOT, stop_session
from tools.mlflow_ui import free_port

SENTENCES = ["ka lo mi nu", "xe va", "", "  so tu   va pe ri "]
NATIVE_OFF = {"ATTENTION_STUDY_NATIVE": "off"}
LOAD = """\
import json, sys
import mlflow.pyfunc
model = mlflow.pyfunc.load_model(sys.argv[1])
found = model.predict(json.loads(sys.argv[2]), params={"beam_size": 2})
print(json.dumps({"found": found, "pipeline": sys.modules["pipeline"].__file__}))
"""


def _requirement_closure(requirements: list[str]) -> dict[str, importlib.metadata.Distribution]:
    """The installed distributions ``requirements`` bring, transitively (markers and
    extras evaluated as pip would here)."""
    todo, found = [Requirement(line) for line in requirements], {}
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        found[name] = importlib.metadata.distribution(name)  # not installed: a wrong name
        for spec in found[name].requires or []:
            dependency = Requirement(spec)
            extras = ("", *requirement.extras)
            if dependency.marker is None or any(
                dependency.marker.evaluate({"extra": e}) for e in extras
            ):
                todo.append(dependency)
    return found


def _link_distributions(requirements: list[str], into: Path) -> None:
    """Symlink into ``into`` the files of what installing ``requirements`` would bring: a
    top-level entry whole when only those distributions own files in it, else file by
    file (a namespace folder shared with a distribution left out)."""
    wanted = _requirement_closure(requirements)
    owners: dict[str, set[str]] = {}
    for dist in importlib.metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        for top in {f.parts[0] for f in dist.files or []}:
            owners.setdefault(top, set()).add(name)
    for dist in wanted.values():
        for file in dist.files or []:
            top = file.parts[0]
            if top in ("..", "__pycache__"):  # scripts in bin/, compiled caches
                continue
            entry = top if owners[top] <= wanted.keys() else file
            link = into / entry
            if not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(dist.locate_file(entry))


def _console_script(bin_dir: Path, python: Path, name: str) -> None:
    """``bin/<name>`` as pip would write it for the clean interpreter."""
    points = importlib.metadata.entry_points(group="console_scripts", name=name)
    (value,) = {point.value for point in points}  # mlflow and mlflow-skinny: the same
    module, _, attribute = value.partition(":")
    script = bin_dir / name
    script.write_text(
        f"#!{python}\nimport sys\nfrom {module} import {attribute}\nsys.exit({attribute}())\n"
    )
    script.chmod(0o755)


def _wait_until_up(process: subprocess.Popen, url: str, log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, log.read_text()[-4000:]
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        assert time.monotonic() < deadline, log.read_text()[-4000:]
        time.sleep(0.5)


@contextlib.contextmanager
def _tracking_server(root: Path) -> Iterator[str]:
    """``mlflow server`` on 127.0.0.1 over a SQLite store in ``root``, serving the
    artifacts (its default) from ``root/artifacts``; its URL."""
    url, log = f"http://127.0.0.1:{free_port()}", root / "server.log"
    command = [sys.executable, "-m", "mlflow", "server", "--workers", "1", "--host", "127.0.0.1"]
    command += ["--port", url.rsplit(":", 1)[1], "--backend-store-uri", f"sqlite:///{root}/s.db"]
    command += ["--artifacts-destination", str(root / "artifacts")]
    with open(log, "w") as sink:
        server = subprocess.Popen(
            command, cwd=root, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_until_up(server, f"{url}/health", log)
        yield url
    finally:
        stop_session(server)


def _log_variant(folder: Path, root: Path, uri: str | None = None) -> tuple[Tracker, str, Path]:
    """``folder``'s variant saved with :func:`save_pyfunc` and logged as the train stage
    logs it, to ``uri`` (default: a SQLite store in ``root``): the tracker, the model id
    and the saved model folder."""
    with pytest.MonkeyPatch.context() as patch:
        for key in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "DVC_EXP_NAME"):
            patch.delenv(key, raising=False)
        settings = TrackingConfig(experiment="env", **({"uri": uri} if uri else {}))
        tracker = Tracker(resolve(InfraFile(tracking=settings), root, "test infra"))
    run_id = tracker.start_run("x")
    names = ("checkpoint.pt", "config.json", "src.model", "tgt.model")
    model_dir = save_pyfunc([folder / n for n in names], root / "model")
    model_id = tracker.log_model(run_id, "x", model_dir, step=1, params={}, tags={})
    return tracker, model_id, model_dir


def _load_in(clean, model_uri: str, tracking_uri: str) -> subprocess.CompletedProcess:
    python, env, cwd = clean
    return subprocess.run(
        [python, "-c", LOAD, model_uri, json.dumps(SENTENCES)],
        cwd=cwd,
        env={**env, "MLFLOW_TRACKING_URI": tracking_uri},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def logged(tiny_variant_folder, tmp_path_factory):
    """The tiny variant logged to a SQLite store: ``(tracking URI, model id, the saved
    model folder)``."""
    tracker, model_id, model_dir = _log_variant(
        tiny_variant_folder, tmp_path_factory.mktemp("store")
    )
    return tracker.uri, model_id, model_dir


@pytest.fixture(scope="module")
def clean(logged, tmp_path_factory):
    """``(python, environment, working folder)`` of the clean environment."""
    uri, _, model_dir = logged
    base = tmp_path_factory.mktemp("clean")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    requirements = [
        line.strip()
        for line in (model_dir / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "-"))
    ]
    _link_distributions(requirements, base / "deps")
    (site,) = (venv / "lib").glob("python*/site-packages")
    (site / "deps.pth").write_text(f"{base / 'deps'}\n")
    for name in ("mlflow", "uvicorn"):  # `mlflow models serve` runs `uvicorn` from PATH
        _console_script(venv / "bin", python, name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "MLFLOW_"))}
    env.pop("VIRTUAL_ENV", None)
    env |= {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "PYTHONNOUSERSITE": "1"}
    env |= {"MLFLOW_TRACKING_URI": uri, **NATIVE_OFF}  # the store a user points at
    cwd = base / "elsewhere"
    cwd.mkdir()
    bare = subprocess.run(
        [python, "-c", "import pipeline"], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert bare.returncode != 0 and "No module named 'pipeline'" in bare.stderr, bare.stderr
    return python, env, cwd


@pytest.fixture(scope="module")
def expected(tiny_variant_folder):
    """What ``pipeline.translate`` (the command line's path) gives, beam 2 and beam 5."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in NATIVE_OFF.items():
            patch.setenv(key, value)
        translator = Translator.load(tiny_variant_folder)
        return {
            beam: [t.translation for t in translator.translate(SENTENCES, beam_size=beam)]
            for beam in (2, 5)
        }


def test_the_model_carries_its_code_and_names_its_requirements(logged):
    _, _, model_dir = logged
    code = model_dir / "code" / "pipeline"
    assert (code / "translate" / "mlflow_model.py").is_file()
    assert (code / "kernels" / "native" / "additive_energy.cpp").is_file()
    assert not (code / "report").exists() and not (code / "sweep").exists()  # only what loads
    names = {
        canonicalize_name(Requirement(line).name)
        for line in (model_dir / "requirements.txt").read_text().split()
    }
    assert {"torch", "mlflow", "sentencepiece", "numpy", "pydantic", "pyyaml"} <= names
    assert "attention-study" not in names


def test_a_logged_variant_loads_and_translates_without_the_project(logged, clean, expected):
    uri, model_id, _ = logged
    done = _load_in(clean, f"models:/{model_id}", uri)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["found"] == expected[2] and any(result["found"])
    assert REPO_ROOT not in Path(result["pipeline"]).parents  # the model's own copy


def test_a_logged_variant_serves_without_the_project(logged, clean, expected):
    python, env, cwd = clean
    _, model_id, _ = logged
    port = free_port()
    command = [python.parent / "mlflow", "models", "serve", "-m", f"models:/{model_id}"]
    command += ["--env-manager", "local", "-h", "127.0.0.1", "-p", str(port), "-w", "1"]
    log = cwd / "serve.log"
    with open(log, "w") as sink:
        server = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_until_up(server, f"{url}/ping", log)
        request = urllib.request.Request(
            f"{url}/invocations",
            data=json.dumps({"inputs": SENTENCES}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.loads(response.read())
    finally:
        stop_session(server)
    assert answer["predictions"] == expected[5]


def test_a_variant_logged_through_a_server_loads_from_it_without_the_project(
    tiny_variant_folder, clean, expected, tmp_path
):
    """Through a tracking server, artifacts are addressed as ``mlflow-artifacts:`` URIs
    that the server resolves (no path of the machine that logged them): the model loads
    wherever the server is reachable."""
    with _tracking_server(tmp_path) as url:
        tracker, model_id, _ = _log_variant(tiny_variant_folder, tmp_path, uri=url)
        location = tracker.client.get_experiment(tracker.experiment_id).artifact_location
        assert location.startswith("mlflow-artifacts:/")
        assert tracker.client.get_logged_model(model_id).artifact_location.startswith(location)
        done = _load_in(clean, f"models:/{model_id}", url)
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["found"] == expected[2]
