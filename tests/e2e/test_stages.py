"""The fetch/tokenize stages as users run them: CLI processes and the real DVC pipeline."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from pipeline.io import sha256_file
from tests.support import REPO_ROOT, synthetic_pairs, write_params, write_tsv

SMALL = {
    "fetch": {
        "source": "tsv",
        "path": "corpus.tsv",
        "split": {
            "dev_size": 40,
            "test_size": 120,
            "test_min_per_bucket": 10,
            "exclude_from_test": None,
        },
    },
    "tokenize": {"vocab_size": 120},
}


def run_stage(module: str, *args: str, cwd=REPO_ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (
            {"fetch": {"source": "tsv", "path": "missing.tsv"}},
            "error: missing.tsv: corpus file not found (fetch.path)",
        ),
        (
            {"fetch": {"source_translation": "elvish"}},
            "error: fetch.source_translation: unknown translation 'elvish'",
        ),
        ({"fetch": {"spilt": {}}}, "error: fetch.spilt: unknown key"),
        (
            {"fetch": {"source": "url", "url": "http://127.0.0.1:9/x.tsv", "sha256": "a" * 64}},
            "error: http://127.0.0.1:9/x.tsv: download failed",
        ),
    ],
)
def test_fetch_bad_input_is_one_line_and_writes_nothing(tmp_path, params, expected):
    params_file = write_params(tmp_path / "params.yaml", params)
    out = tmp_path / "raw"
    result = run_stage(
        "stages.fetch", "--params", str(params_file), "--out", str(out), cwd=tmp_path
    )
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(expected), result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".raw")]


def test_failed_rerun_keeps_previous_outputs(tmp_path):
    write_tsv(tmp_path / "corpus.tsv", synthetic_pairs(600))
    params_file = write_params(tmp_path / "params.yaml", SMALL)
    out = tmp_path / "raw"
    assert (
        run_stage(
            "stages.fetch", "--params", str(params_file), "--out", str(out), cwd=tmp_path
        ).returncode
        == 0
    )
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (tmp_path / "corpus.tsv").write_text("broken line without tab\n")
    result = run_stage(
        "stages.fetch", "--params", str(params_file), "--out", str(out), cwd=tmp_path
    )
    assert (
        result.returncode == 1 and "corpus.tsv:1: expected 2 tab-separated columns" in result.stderr
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_dvc_repro_reruns_on_a_corpus_edit_and_nothing_otherwise(tmp_path):
    """The local corpus a param names is a dependency: an unchanged file reruns nothing
    (the always-run inputs stage rewrites an identical record); an edit reruns fetch and
    tokenize."""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("pipeline", "stages"):
        shutil.copytree(
            REPO_ROOT / name, project / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    dvc_yaml = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())
    dvc_yaml["stages"] = {k: dvc_yaml["stages"][k] for k in ("inputs", "fetch", "tokenize")}
    (project / "dvc.yaml").write_text(yaml.safe_dump(dvc_yaml, sort_keys=False))
    write_params(project / "params.yaml", SMALL)
    write_tsv(project / "corpus.tsv", synthetic_pairs(600))
    env = dict(os.environ, PYTHONPATH=str(project))
    env.pop("DVC_NO_ANALYTICS", None)

    def sh(*cmd):
        return subprocess.run(
            cmd, cwd=project, env=env, capture_output=True, text=True, timeout=300
        )

    dvc = [sys.executable, "-m", "dvc"]
    assert sh("git", "init", "-q").returncode == 0
    assert sh(*dvc, "init", "-q").returncode == 0
    first = sh(*dvc, "repro", "tokenize")
    assert first.returncode == 0, first.stderr
    for name in ("train.tsv", "dev.tsv", "test.tsv", "corpus.json"):
        assert (project / "data" / "raw" / name).is_file()
    for name in ("src.model", "tgt.model", "train.npz", "dev.npz", "test.npz", "stats.json"):
        assert (project / "data" / "tok" / name).is_file()
    second = sh(*dvc, "repro", "tokenize")
    assert second.returncode == 0, second.stderr
    assert "Running stage 'inputs'" in second.stdout
    assert "Running stage 'fetch'" not in second.stdout
    assert "Running stage 'tokenize'" not in second.stdout

    edited = synthetic_pairs(600)
    edited[0] = ("an edited first line", "una primera linea editada")
    write_tsv(project / "corpus.tsv", edited)
    status = sh(*dvc, "status")  # DVC cannot look inside a param's path: it says so
    assert status.returncode == 0 and "inputs" in status.stdout, status.stdout
    assert "always changed" in status.stdout, status.stdout
    third = sh(*dvc, "repro", "tokenize")
    assert third.returncode == 0, third.stderr
    assert "Running stage 'fetch'" in third.stdout and "Running stage 'tokenize'" in third.stdout
    corpus = json.loads((project / "data" / "raw" / "corpus.json").read_text())
    record = json.loads((project / "data" / "inputs.json").read_text())
    assert record["files"]["fetch.path"]["sha256"] == sha256_file(project / "corpus.tsv")
    assert corpus["counts"]["read"] == 600
    all_raw = "".join(
        (project / "data" / "raw" / f"{n}.tsv").read_text() for n in ("train", "dev", "test")
    )
    assert "an edited first line" in all_raw


def test_a_corpus_edited_after_its_record_is_refused(tmp_path):
    write_tsv(tmp_path / "corpus.tsv", synthetic_pairs(600))
    params_file = write_params(tmp_path / "params.yaml", SMALL)
    record = tmp_path / "inputs.json"
    common = ("--params", str(params_file))
    assert run_stage("stages.inputs", *common, "--out", str(record), cwd=tmp_path).returncode == 0
    with (tmp_path / "corpus.tsv").open("a") as handle:
        handle.write("one more\tuna mas\n")
    out = tmp_path / "raw"
    result = run_stage(
        "stages.fetch", *common, "--inputs", str(record), "--out", str(out), cwd=tmp_path
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: fetch.path: the corpus changed after {record} was written; run dvc repro again"
    ], result.stderr
    assert not out.exists()


def test_an_empty_params_file_is_refused_in_one_line(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text("\n")
    out = tmp_path / "raw"
    result = run_stage("stages.fetch", "--params", str(params), "--out", str(out), cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "empty params file" in errors[0], result.stderr
    assert not out.exists()


def test_an_unusable_tracking_uri_is_one_line_before_any_training(tmp_path):
    from tests.support import make_project, stage, train_args

    params = make_project(tmp_path, max_epochs=1)
    infra = yaml.safe_load((tmp_path / "infra.yaml").read_text())
    infra["tracking"]["uri"] = "nosuchscheme://x"
    (tmp_path / "infra.yaml").write_text(yaml.safe_dump(infra))
    result = stage("stages.train", params, tmp_path, *train_args(tmp_path), timeout=180)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-2000:]
    assert "tracking.uri 'nosuchscheme://x'" in errors[0] and "infra.yaml" in errors[0]
    assert not (tmp_path / "models").exists()
