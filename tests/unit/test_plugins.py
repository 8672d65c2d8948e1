"""Plugin scorers: loaded from a file of the user's project, validated with errors that
name the file, part of the variant's cache key, and built like a built-in."""

from __future__ import annotations

import shutil
import sys

import pytest
import torch

from pipeline.config import ConfigError, load_config
from pipeline.config.grid import expand_grid, validate_grid
from pipeline.config.params import read_params
from pipeline.models.attention import attend, build_scorer
from pipeline.scorers import catalogue, plugins
from pipeline.scorers.plugins import (
    PluginError,
    PluginSource,
    load_plugins,
    read_plugins,
    scan_plugins,
)
from tests.support import REPO_ROOT, write_params

GOOD = (REPO_ROOT / "scorers" / "cosine.py").read_text()


def _source(text: str, path: str = "scorers/mine.py") -> PluginSource:
    return PluginSource(path, text)


def test_the_example_plugin_registers_and_attends_like_a_built_in():
    assert load_plugins([_source(GOOD, "scorers/cosine.py")]) == ["cosine"]
    entry = catalogue.get("cosine")
    assert entry.plugin == "scorers/cosine.py" and entry.order >= len(catalogue.BUILTIN)
    assert catalogue.order_of("cosine") > catalogue.order_of("location")
    scorer = build_scorer("cosine", 8)
    values = torch.randn(2, 5, 8, requires_grad=True)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    context, weights = attend(scorer, torch.randn(2, 3, 8), scorer.precompute(values), values, mask)
    assert context.shape == (2, 3, 8)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 3))
    assert (weights[1, :, 3:] == 0).all()
    context.sum().backward()
    assert scorer.log_sharpness.grad is not None  # its parameter trains


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD.replace("def score_projected", "def other"), "must define score_projected"),
        (
            GOOD.replace("class CosineScorer(Scorer)", "class CosineScorer(nn.Module)"),
            "must subclass pipeline.models.attention.Scorer",
        ),
        (GOOD.replace('"cosine",', '"additive",'), "'additive' is taken (a built-in scorer)"),
        (GOOD.replace('"cosine",', '"Cos ine",'), "use lower-case letters"),
        ("import torch\n", "registers no scorer"),
        ("def broken(:\n", "mine.py:1: syntax error"),
    ],
)
@pytest.mark.parametrize("read", [load_plugins, scan_plugins])
def test_a_bad_plugin_fails_naming_its_file(text, message, read):
    with pytest.raises(PluginError, match="scorers/mine.py") as err:
        read([_source(text)])
    assert message in str(err.value)
    assert catalogue.names() == catalogue.BUILTIN  # nothing half-registered


def _project(root, scorer_file: str = "cosine.py", grid: tuple = ("none", "cosine")):
    (root / "scorers").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "scorers" / "cosine.py", root / "scorers" / scorer_file)
    params = {"plugins": [f"scorers/{scorer_file}"], "train": {"grid": {"scorer": list(grid)}}}
    return write_params(root / "params.yaml", params)


def test_reading_params_changes_no_process_state(tmp_path):
    """Reading params runs its plugins aside for their names: nothing is registered, loaded
    or imported, so what a process read before never decides what is valid."""
    modules = set(sys.modules)
    config = read_params(_project(tmp_path))
    validate_grid(config)
    assert "cosine" in {v.model.scorer for v in expand_grid(config)}
    assert [s.path for s in config.plugin_sources] == ["scorers/cosine.py"]
    assert catalogue.names() == catalogue.BUILTIN and plugins.loaded() == []
    assert not {m for m in set(sys.modules) - modules if m.startswith(plugins.MODULE_PREFIX)}
    # a name is valid in the params that name its plugin, not because a process loaded it
    load_plugins(list(config.plugin_sources))
    alone = write_params(tmp_path / "alone.yaml", {"model": {"scorer": "cosine"}})
    with pytest.raises(ConfigError, match="model.scorer: unknown scorer 'cosine'"):
        read_params(alone)
    # and another project's file may take a name this process has loaded from elsewhere
    other = read_params(_project(tmp_path / "other", "mine.py"))
    assert other.model_copy().validation_context["scorers"][-1] == "cosine"


def test_two_plugin_files_of_one_name_are_refused_naming_the_second(tmp_path):
    first = read_plugins(["scorers/cosine.py"], REPO_ROOT)[0]
    second = PluginSource("scorers/copy.py", first.text)
    with pytest.raises(PluginError, match="scorers/copy.py: scorer name 'cosine' is taken"):
        scan_plugins([first, second])


def test_a_stage_loads_the_plugin_and_its_edits_change_the_cache_key(tmp_path):
    (tmp_path / "scorers").mkdir()
    shutil.copy(REPO_ROOT / "scorers" / "cosine.py", tmp_path / "scorers" / "cosine.py")
    params = {"plugins": ["scorers/cosine.py"], "train": {"grid": {"scorer": ["none", "cosine"]}}}
    config = load_config(write_params(tmp_path / "params.yaml", params))
    assert "cosine" not in catalogue.names()  # reading params loads nothing
    load_plugins(list(config.plugin_sources))  # as a stage's entry point does
    variants = {v.model.scorer: v for v in expand_grid(config)}
    before = {name: v.key("data") for name, v in variants.items()}
    edited = GOOD.replace("2.3", "2.0")
    (tmp_path / "scorers" / "cosine.py").write_text(edited)
    load_plugins(list(load_config(tmp_path / "params.yaml").plugin_sources))
    assert variants["cosine"].key("data") != before["cosine"]  # retrained
    assert variants["none"].key("data") == before["none"]  # untouched


def test_params_errors_name_the_key_and_the_file(tmp_path):
    missing = write_params(tmp_path / "a.yaml", {"plugins": ["scorers/none.py"]})
    with pytest.raises(PluginError, match=r"plugins\[0\]: scorers/none.py: file not found"):
        load_config(missing)
    unknown = write_params(tmp_path / "b.yaml", {"train": {"grid": {"scorer": ["cosinus"]}}})
    with pytest.raises(ConfigError, match=r"train.grid.scorer\[0\]: unknown scorer 'cosinus'"):
        load_config(unknown)
    with pytest.raises(PluginError, match=r"plugins\[0\]: x.txt: a plugin is a Python file"):
        read_plugins(["x.txt"], tmp_path)


def test_a_plugin_outside_the_project_folder_is_refused_unless_allowed(tmp_path, monkeypatch):
    from pipeline.scorers.plugins import ANYWHERE_ENV, PluginError, read_plugins

    project, outside = tmp_path / "project", tmp_path / "evil.py"
    project.mkdir()
    outside.write_text("raise SystemExit('ran')\n")
    monkeypatch.delenv(ANYWHERE_ENV, raising=False)
    with pytest.raises(PluginError) as err:
        read_plugins(["../evil.py"], project)
    message = str(err.value)
    assert message.startswith("plugins[0]: ../evil.py: outside the project folder")
    assert ANYWHERE_ENV in message and "\n" not in message
    monkeypatch.setenv(ANYWHERE_ENV, "1")
    (source,) = read_plugins(["../evil.py"], project)
    assert "ran" in source.text
