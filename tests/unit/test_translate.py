"""Translating text with a trained variant: the library, the command line and export."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml

from pipeline.data.dataset import EOS_ID, TokenizedData
from pipeline.models.checkpoint import load_checkpoint
from pipeline.models.search import translate as search
from pipeline.translate import TranslateError, Translator, export, resolve_model
from tests.conftest import tiny_sentence_pairs


def _cli(*args, stdin: str = "", cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "pipeline.translate", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_translations_are_the_decoder_s_on_the_same_sentences(tiny_variant_folder, tiny_tok_dir):
    """Text in (normalised, encoded) gives what the evaluate stage's decoder gives for
    the same sentences from data/tok, greedy and beam."""
    data = TokenizedData.load(tiny_tok_dir)
    test = data.split("test")
    sources = [s for s, _ in tiny_sentence_pairs(12, 3)]
    translator = Translator.load(tiny_variant_folder)
    model = load_checkpoint(tiny_variant_folder / "checkpoint.pt").model
    for beam in (1, 3):
        ids, _ = search(model, test, beam_size=beam, max_ratio=2.0)
        expected = data.tgt_tokenizer.decode(ids)
        got = [t.translation for t in translator.translate(sources, beam_size=beam)]
        assert got == expected
        assert any(got)  # a trained model says something


def test_command_line_keeps_lines_in_order_and_blank_lines_blank(tiny_variant_folder):
    sources = [s for s, _ in tiny_sentence_pairs(5, 4)]
    text = "\n".join([sources[0], "", "  " + sources[1].replace(" ", "   ") + " ", *sources[2:]])
    done = _cli(tiny_variant_folder, "--greedy", stdin=text + "\n")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")[:-1]
    assert len(lines) == len(sources) + 1 and lines[1] == ""
    expected = Translator.load(tiny_variant_folder).translate(sources, beam_size=1)
    assert [lines[0], *lines[2:]] == [t.translation for t in expected]  # spaces normalised


def test_json_with_attention_has_one_row_per_target_piece(tiny_variant_folder, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("ka lo mi nu\nxe va\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    done = _cli(tiny_variant_folder, "-i", source, "-o", out, "--json", "--attention")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["source"] for r in rows] == ["ka lo mi nu", "xe va"]
    for row in rows:
        weights = np.array(row["attention"])
        assert weights.shape == (len(row["target_pieces"]), len(row["source_pieces"]))
        assert np.allclose(weights.sum(axis=1), 1.0, atol=1e-3)  # a distribution per step


def test_an_exported_folder_translates_alone_and_the_same(tiny_variant_folder, tmp_path):
    exported = tmp_path / "exported"
    done = _cli(tiny_variant_folder, "--export", exported)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in exported.iterdir()) == sorted(
        ["checkpoint.pt", "config.json", "src.model", "tgt.model"]
    )
    sources = [s for s, _ in tiny_sentence_pairs(6, 5)]
    moved = shutil.move(str(exported), tmp_path / "elsewhere")
    first = Translator.load(tiny_variant_folder).translate(sources)
    assert Translator.load(moved).translate(sources) == first


def test_a_variant_id_resolves_under_the_models_folder(tiny_variant_folder):
    assert (
        resolve_model(tiny_variant_folder.name, tiny_variant_folder.parent) == tiny_variant_folder
    )
    assert resolve_model(tiny_variant_folder / "checkpoint.pt") == tiny_variant_folder
    with pytest.raises(TranslateError, match="variants in .*additive-rev-h32-s1"):
        resolve_model("dot-h32-s1", tiny_variant_folder.parent)


def test_other_subword_models_are_refused_naming_the_difference(
    tiny_variant_folder, tiny_other_tokenizer, tmp_path
):
    folder = tmp_path / "mixed"
    shutil.copytree(tiny_variant_folder, folder)
    shutil.copyfile(tiny_other_tokenizer, folder / "tgt.model")
    with pytest.raises(TranslateError, match="other tokenizers.*tgt_sha256"):
        Translator.load(folder)


def test_command_line_errors_are_one_line_and_write_nothing(tiny_variant_folder, tmp_path):
    out = tmp_path / "out.txt"
    missing = _cli(tmp_path / "nowhere", "-o", out, stdin="ka lo\n")
    assert missing.returncode == 1 and out.exists() is False
    assert missing.stderr.strip().count("\n") == 0
    assert missing.stderr.startswith("error: ") and "nowhere" in missing.stderr
    folder = tmp_path / "no_tokenizers"
    shutil.copytree(tiny_variant_folder, folder)
    (folder / "src.model").unlink()
    lacking = _cli(folder, stdin="ka lo\n")
    assert lacking.returncode == 1 and "--tok" in lacking.stderr
    damaged = tmp_path / "damaged"
    shutil.copytree(tiny_variant_folder, damaged)
    (damaged / "checkpoint.pt").write_bytes(b"not a checkpoint")
    broken = _cli(damaged, stdin="ka lo\n")
    assert broken.returncode == 1 and "not a readable checkpoint" in broken.stderr


def test_a_hypothesis_cut_at_the_length_cap_has_one_attention_row_per_piece(
    tiny_variant_folder,
):
    translator = Translator.load(tiny_variant_folder)
    (whole,) = translator.translate(["ka lo"], attention=True)
    assert whole.target_pieces[-1] == "</s>"
    assert len(whole.attention) == len(whole.target_pieces)
    with torch.no_grad():  # a model that never ends a sentence: cut at the cap
        translator.loaded.model.generator.bias[EOS_ID] = -1e4
    translator.max_ratio = 0.0  # floor(0 * n) + 10 tokens
    (cut,) = translator.translate(["ka lo"], attention=True)
    assert "</s>" not in cut.target_pieces
    assert len(cut.attention) == len(cut.target_pieces) == 10


def test_export_never_replaces_a_folder_with_files(tiny_variant_folder, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(TranslateError, match="not empty"):
        export(tiny_variant_folder, taken)
    assert (taken / "notes.txt").read_text() == "mine"
    with pytest.raises(TranslateError, match="not empty"):
        export(tiny_variant_folder, tiny_variant_folder)  # its own folder
    assert (tiny_variant_folder / "history.csv").is_file()


def test_input_that_is_not_utf8_is_one_line_naming_it(tiny_variant_folder, tmp_path):
    source = tmp_path / "latin1.txt"
    source.write_bytes("ka lo\nse\xf1or\n".encode("latin-1"))
    done = _cli(tiny_variant_folder, "-i", source)
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: {source}: not UTF-8 text (invalid continuation byte)"


def test_dvc_pull_is_suggested_only_where_a_dvc_remote_is_configured(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / ".dvc").mkdir()
    config = tmp_path / ".dvc" / "config"
    config.write_text("[core]\n    analytics = false\n")
    with pytest.raises(TranslateError) as plain:
        resolve_model("additive-fwd-h16-s1", tmp_path / "models")
    assert "dvc repro train" in str(plain.value) and "dvc pull" not in str(plain.value)
    config.write_text("[core]\n    remote = storage\n['remote \"storage\"']\n    url = /mnt/x\n")
    with pytest.raises(TranslateError, match=r"`dvc repro train` or `dvc pull`"):
        resolve_model("additive-fwd-h16-s1", tmp_path / "models")


def _project_with(variant_folder, root, params: dict | None):
    """A project folder holding ``models/<variant>`` and, if given, its params.yaml."""
    folder = root / "models" / variant_folder.name
    shutil.copytree(variant_folder, folder)
    if params is not None:
        (root / "params.yaml").write_text(yaml.safe_dump(params))
    return folder


def test_inputs_longer_than_the_training_cut_are_counted_in_one_warning(
    tiny_variant_folder, tmp_path
):
    """The cut is read from params.yaml beside the models folder; the warning counts every
    chunk's lines (more lines than one chunk) and is written once."""
    params = {"fetch": {"split": {"max_train_words": 3}}}
    folder = _project_with(tiny_variant_folder, tmp_path, params)
    lines = ["ka lo mi nu", "xe va", "so tu va pe ri"] * 100  # 300 > CHUNK_LINES
    done = _cli(folder, "--greedy", stdin="\n".join(lines) + "\n")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == len(lines)
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1, done.stderr
    assert "200 of 300 input lines have more than 3 words" in warnings[0]
    assert "fetch.split.max_train_words" in warnings[0]
    within = _cli(folder, "--greedy", stdin="ka lo mi\nxe va\n")
    assert within.returncode == 0 and "WARNING" not in within.stderr, within.stderr


def test_the_training_cut_is_the_variant_s_own_record_else_the_params_default(
    tiny_variant_folder, tmp_path
):
    defaults = _project_with(tiny_variant_folder, tmp_path / "a", {"train": {}})
    assert Translator.load(defaults).train_cut == 30  # params.yaml without the key
    uncut = _project_with(tiny_variant_folder, tmp_path / "b", {"fetch": {"split": {}}})
    (tmp_path / "b" / "params.yaml").write_text("fetch:\n  split:\n    max_train_words: null\n")
    assert Translator.load(uncut).train_cut is None  # no cut: nothing is beyond it
    assert Translator.load(uncut).beyond_cut(["ka " * 100]) == 0
    recorded = _project_with(tiny_variant_folder, tmp_path / "c", {"train": {}})
    config = json.loads((recorded / "config.json").read_text())
    config["params"]["fetch.split.max_train_words"] = 2
    (recorded / "config.json").write_text(json.dumps(config))
    translator = Translator.load(recorded)
    assert translator.train_cut == 2  # the variant's record wins over params.yaml
    assert translator.beyond_cut(["ka lo", " ka  lo\tmi ", "", "xe"]) == 1
    alone = _project_with(tiny_variant_folder, tmp_path / "d", None)
    assert Translator.load(alone).train_cut is None  # nothing says: no warning
