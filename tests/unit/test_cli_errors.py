"""The stage CLIs: an error the user can fix is one line; a bug keeps its traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from pipeline.config import ConfigError
from pipeline.data.pairs import read_tsv_pairs
from pipeline.runtime.precision import resolve
from pipeline.scorers.plugins import PluginError
from stages._cli import traceback_note, user_error
from tests.support import REPO_ROOT

PARAMS = REPO_ROOT / "params.yaml"


def _raised(function):
    try:
        function()
    except Exception as err:  # noqa: BLE001
        return err
    raise AssertionError("nothing raised")


def test_project_errors_and_named_files_are_user_errors(tmp_path):
    assert user_error(ConfigError("train.grid: bad"))
    assert user_error(PluginError("scorers/x.py: bad"))
    assert user_error(_raised(lambda: read_tsv_pairs(tmp_path / "missing.tsv")))


def test_a_library_value_error_is_a_bug_shown_with_its_traceback():
    err = _raised(lambda: np.zeros(3).reshape(2, 2))
    assert isinstance(err, ValueError) and not user_error(err)
    assert not user_error(_raised(lambda: {}["key"]))


def test_a_deliberate_error_is_its_message_alone(tmp_path):
    assert traceback_note(ConfigError("train.grid: bad"), "train") == ""
    assert traceback_note(_raised(lambda: read_tsv_pairs(tmp_path / "missing.tsv")), "fetch") == ""


def test_an_error_that_may_be_a_bug_names_a_file_with_its_traceback():
    def project_code():
        return int("not a number")  # a ValueError from a builtin: no frame of its own

    err = _raised(project_code)
    note = traceback_note(err, "evaluate")
    path = Path(note.removeprefix(" (traceback: ").removesuffix(")"))
    try:
        assert path.name.startswith("attention-study-evaluate-")
        text = path.read_text()
        assert "Traceback" in text and "project_code" in text and "not a number" in text
    finally:
        path.unlink(missing_ok=True)


def test_a_stage_prints_the_traceback_file_in_its_one_line(monkeypatch, capsys, tmp_path):
    import pytest

    from stages import _cli

    def main(args, config):
        resolve("fp64", "cpu")  # a ValueError raised by the project's own code

    monkeypatch.setattr(sys, "argv", ["stages/evaluate.py", "--params", str(PARAMS)])
    with pytest.raises(SystemExit) as stop:
        _cli.run(main, _cli.parser("test"))
    line = capsys.readouterr().err.strip()
    assert stop.value.code == 1 and "\n" not in line
    assert line.startswith("error: train.precision / evaluate.precision: expected one of")
    assert "got 'fp64' (traceback: " in line
    path = Path(line.rsplit("(traceback: ", 1)[1].rstrip(")"))
    try:
        assert "Traceback" in path.read_text() and path.name.startswith("attention-study-evaluate-")
    finally:
        path.unlink(missing_ok=True)
