"""The variant cache keeps each finished variant with the sha256 of its files; a restore
verifies them, so a damaged entry is retrained, never served."""

from __future__ import annotations

import json
import logging

import pytest

from pipeline.artifacts import VariantFiles
from pipeline.models.checkpoint import load_checkpoint
from pipeline.records.train import Trained
from pipeline.sweep.cache import VariantCache
from tests.support import train_summary


def _finished_variant(folder, config_hash="abc"):
    folder.mkdir(parents=True)
    (folder / VariantFiles.CHECKPOINT).write_bytes(bytes(range(256)) * 64)
    (folder / VariantFiles.HISTORY).write_text("step,dev_loss\n200,4.1\n")
    (folder / VariantFiles.CONFIG).write_text("{}")
    VariantFiles(folder).write_result(Trained(config_hash, train_summary()))
    return folder


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_a_damaged_entry_is_not_restored_and_is_removed(tmp_path, caplog, damage):
    cache = VariantCache(tmp_path / "cache")
    cache.store(_finished_variant(tmp_path / "trained"), "abc")
    entry = cache.files("abc")
    assert json.loads((entry.folder / VariantFiles.MANIFEST).read_text()).keys() == {
        VariantFiles.CHECKPOINT,
        VariantFiles.HISTORY,
        VariantFiles.CONFIG,
        VariantFiles.RESULT,
    }
    assert cache.restore("abc", tmp_path / "models" / "v1") is not None  # intact: restored
    assert VariantFiles(tmp_path / "models" / "v1").damaged() is None  # manifest travels
    checkpoint = entry.checkpoint
    data = bytearray(checkpoint.read_bytes())
    checkpoint.unlink()  # a hard link to models/ before: damage the entry's own copy
    if damage == "flip":
        data[1000:1064] = bytes(64)
        checkpoint.write_bytes(bytes(data))
    elif damage == "truncate":
        checkpoint.write_bytes(bytes(data[:100]))
    with caplog.at_level(logging.WARNING):
        assert cache.restore("abc", tmp_path / "models" / "v2") is None
    (warning,) = [r.getMessage() for r in caplog.records if "variant cache entry" in r.getMessage()]
    assert str(entry.folder) in warning and "the variant retrains" in warning
    assert ("missing" if damage == "delete" else "does not match") in warning
    assert not entry.folder.exists()  # a plain rerun does not restore it again
    assert not (tmp_path / "models" / "v2").exists()


def test_an_entry_without_hashes_is_not_trusted(tmp_path, caplog):
    cache = VariantCache(tmp_path / "cache")
    folder = _finished_variant(cache.files("abc").folder)  # written without a manifest
    with caplog.at_level(logging.WARNING):
        assert cache.restore("abc", tmp_path / "models" / "v") is None
    assert any("no readable sha256.json" in r.getMessage() for r in caplog.records)
    assert not folder.exists()


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04" + bytes(60), bytes(range(200))])
def test_an_unreadable_checkpoint_is_one_error_naming_the_file_and_the_remedy(tmp_path, content):
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(content)
    with pytest.raises(ValueError) as caught:
        load_checkpoint(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: not a readable checkpoint") and "\n" not in message
    assert "dvc repro train" in message
