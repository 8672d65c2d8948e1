"""Plugin scorers: loaded from a file of the user's project, validated with errors that
name the file, part of the variant's cache key, and built like a built-in."""

from __future__ import annotations

import shutil

import pytest
import torch

from pipeline.config import ConfigError, load_config
from pipeline.config.grid import expand_grid
from pipeline.models.attention import attend, build_scorer
from pipeline.scorers import catalogue
from pipeline.scorers.plugins import PluginError, PluginSource, load_plugins, read_plugins
from pipeline.train.trainer import variant_key
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
def test_a_bad_plugin_fails_naming_its_file(text, message):
    with pytest.raises(PluginError, match="scorers/mine.py") as err:
        load_plugins([_source(text)])
    assert message in str(err.value)


def test_params_load_the_plugin_and_its_edits_change_the_cache_key(tmp_path):
    (tmp_path / "scorers").mkdir()
    shutil.copy(REPO_ROOT / "scorers" / "cosine.py", tmp_path / "scorers" / "cosine.py")
    params = {"plugins": ["scorers/cosine.py"], "train": {"grid": {"scorer": ["none", "cosine"]}}}
    config = load_config(write_params(tmp_path / "params.yaml", params))
    variants = {v.model.scorer: v for v in expand_grid(config)}
    before = {name: variant_key(v, "data") for name, v in variants.items()}
    edited = GOOD.replace("2.3", "2.0")
    (tmp_path / "scorers" / "cosine.py").write_text(edited)
    load_config(tmp_path / "params.yaml")
    assert variant_key(variants["cosine"], "data") != before["cosine"]  # retrained
    assert variant_key(variants["none"], "data") == before["none"]  # untouched


def test_params_errors_name_the_key_and_the_file(tmp_path):
    missing = write_params(tmp_path / "a.yaml", {"plugins": ["scorers/none.py"]})
    with pytest.raises(PluginError, match=r"plugins\[0\]: scorers/none.py: file not found"):
        load_config(missing)
    unknown = write_params(tmp_path / "b.yaml", {"train": {"grid": {"scorer": ["cosinus"]}}})
    with pytest.raises(ConfigError, match=r"train.grid.scorer\[0\]: unknown scorer 'cosinus'"):
        load_config(unknown)
    with pytest.raises(PluginError, match=r"plugins\[0\]: x.txt: a plugin is a Python file"):
        read_plugins(["x.txt"], tmp_path)
