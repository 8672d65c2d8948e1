"""Presets are overlays: ``python -m tools.preset NAME`` writes ``params.yaml`` = the default
study with the preset's keys over it, refuses a key the study does not have, and keeps a
``params.yaml`` with edits of its own."""

from __future__ import annotations

import shutil

import pytest
import yaml

from pipeline.config import load_config
from pipeline.config.grid import expand_grid
from pipeline.config.params import Config
from tests.support import REPO_ROOT, write_params
from tools import preset


@pytest.fixture
def params(tmp_path):
    """A copy of the repo's params.yaml (the default study) to write presets over."""
    return shutil.copy(REPO_ROOT / "params.yaml", tmp_path / "params.yaml")


@pytest.mark.parametrize(("name", "variants"), [("quick", 12), ("gpu-cluster", 180)])
def test_a_preset_is_the_default_study_with_its_keys_over_it(params, capsys, name, variants):
    assert preset.main([name, "--params", str(params)]) == 0
    written = load_config(params)
    overlay = load_config(REPO_ROOT / "presets" / f"{name}.yaml")  # a key left out: default
    assert written.model_dump() == overlay.model_dump() and len(expand_grid(written)) == variants
    assert set(yaml.safe_load(params.read_text())) == set(Config.model_fields)  # DVC's sections
    text = params.read_text()
    assert text.count(f"  # {name}") == len(preset.changes(written))
    assert "max_steps:" in text and f"{variants} variants" in capsys.readouterr().out
    # applying another over it, or the same again, is allowed: the file is the tool's
    assert preset.main(["quick", "--params", str(params)]) == 0


def test_an_unknown_key_is_one_line_naming_the_key_and_the_file(params, tmp_path, capsys):
    before = params.read_text()
    overlay = write_params(tmp_path / "mine.yaml", {"train": {"max_step": 500}})
    assert preset.main([str(overlay), "--params", str(params)]) == 1
    assert capsys.readouterr().err == f"error: {overlay}: train.max_step: unknown key\n"
    assert params.read_text() == before


def test_edits_of_your_own_are_not_overwritten_without_force(params, capsys):
    assert preset.main(["quick", "--params", str(params)]) == 0
    params.write_text(params.read_text().replace("max_steps: 500", "max_steps: 700"))
    edited = params.read_text()
    assert preset.main(["gpu-cluster", "--params", str(params)]) == 1
    err = capsys.readouterr().err
    assert "not overwritten: it has values of its own (train.max_steps: 700)" in err
    assert params.read_text() == edited
    assert preset.main(["gpu-cluster", "--params", str(params), "--force"]) == 0
    assert load_config(params).train.max_steps == 6000


def test_an_infrastructure_file_and_an_unknown_name_are_refused(params, capsys):
    assert preset.main(["gpu-cluster-infra", "--params", str(params)]) == 1
    assert "an infrastructure file" in capsys.readouterr().err
    assert preset.main(["quik", "--params", str(params)]) == 1
    assert "no such preset; known: gpu-cluster, quick" in capsys.readouterr().err
    assert load_config(params).model_dump() == Config().model_dump()


def test_the_gpu_cluster_infra_preset_is_an_overlay_of_infra_yaml():
    from pipeline.config.infra import load_infra

    infra = load_infra(REPO_ROOT / "params.yaml", REPO_ROOT / "presets" / "gpu-cluster-infra.yaml")
    assert infra.ray.pending_timeout_minutes == 10  # left out: infra.yaml's value
    assert infra.tracking.experiment == "attention-study"
