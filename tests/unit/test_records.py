"""The records between stages: typed, read back as written, a bad one named in one line,
and read or written nowhere but through their types (the tree is walked for it)."""

from __future__ import annotations

import ast
import dataclasses
import json
import math

import pytest

from pipeline.artifacts import VariantFiles
from pipeline.config.params import ModelConfig, TrainConfig
from pipeline.records.base import RecordError
from pipeline.records.evaluation import LengthBucket, VariantMetrics
from pipeline.records.sweep import FAILED, FINISHED, SweepRecord, VariantRecord
from pipeline.records.train import (
    EPOCH_METRICS,
    HISTORY_FIELDS,
    HistoryRow,
    Trained,
    TrainSummary,
)
from tests.support import REPO_ROOT, train_summary


def summary(**changes) -> TrainSummary:
    return train_summary(**changes)


def record(variant_id="additive-fwd-h16-s1", **changes) -> VariantRecord:
    values = dict(
        id=variant_id,
        status=FINISHED,
        config_hash="0123456789abcdef",
        axes={"scorer": "additive", "seed": 1},
        model=ModelConfig(scorer="additive", hidden_size=16, embedding_size=16),
        train=TrainConfig(seed=1),
        summary=summary(),
    )
    return VariantRecord(**{**values, **changes})


# ------------------------------------------------------------------ round trips
def test_a_sweep_record_reads_back_as_written_byte_for_byte(tmp_path):
    failed = record("none-fwd-h16-s1", status=FAILED, summary=None, error="ClusterError: x")
    sweep = SweepRecord("datahash", {r.id: r for r in (record(), failed)})
    sweep.write(tmp_path)
    first = (tmp_path / "sweep.json").read_bytes()
    again = SweepRecord.load(tmp_path)
    assert again == sweep
    again.write(tmp_path)
    assert (tmp_path / "sweep.json").read_bytes() == first
    data = json.loads(first)["variants"]
    assert "grid" not in data[record().id]["train"]  # the grid is the sweep's, not a variant's
    assert data[record().id]["best_dev_bleu"] == 4.25 and "best_dev_bleu" not in data[failed.id]


def test_still_improving_is_decided_by_the_summary_alone():
    assert not summary(plateaued=True).still_improving
    assert summary(plateaued=False, stop_reason="max_steps").still_improving
    assert record(summary=summary(plateaued=False)).still_improving
    failed = record(status=FAILED, summary=None)
    assert not failed.still_improving and math.isnan(failed.best_dev_bleu)
    row = SweepRecord("h", {"a": record(summary=summary(plateaued=False))}).table().iloc[0]
    assert bool(row.still_improving) and row.stop_reason == "early_stopping"


def test_a_result_json_marks_a_variant_finished_for_its_config_only(tmp_path):
    files = VariantFiles(tmp_path)
    assert files.finished("h1") is None
    files.write_result(Trained("h1", summary()))
    assert files.finished("h1") == Trained("h1", summary())
    assert files.finished("h2") is None
    files.result.write_text('{"config_hash": "h1", "summary": {"steps": 3}}')
    assert files.finished("h1") is None  # unreadable as a summary: not finished


def test_a_malformed_record_is_one_line_naming_the_file_and_the_field(tmp_path):
    good = record().to_json()
    bad = {**good, "best_dev_bleu": "high"}
    (tmp_path / "sweep.json").write_text(json.dumps({"data_hash": "h", "variants": {"v": bad}}))
    with pytest.raises(RecordError) as err:
        SweepRecord.load(tmp_path)
    message = str(err.value)
    assert str(tmp_path / "sweep.json") in message and "best_dev_bleu" in message
    assert "\n" not in message


def test_variant_metrics_keep_their_file_layout(tmp_path):
    buckets = (
        LengthBucket("1-10", 3, "inside", 20.0, 10.0, 30.0),
        LengthBucket("11+", 0, "beyond"),
    )
    metrics = VariantMetrics(
        25.0, 20.0, 30.0, 50.0, 3, "sig", buckets, 1.0, 2.0, 1.5, "cpu", "fp32", beam_size=5
    )
    metrics.write(tmp_path / "metrics.json")
    data = json.loads((tmp_path / "metrics.json").read_text())
    assert list(data)[:7] == [
        "bleu",
        "bleu_low",
        "bleu_high",
        "chrf",
        "sentences",
        "signature",
        "by_length",
    ]
    assert list(data)[-1] == "beam_size" and "attention_entropy" not in data  # no attention
    loaded = VariantMetrics.load(tmp_path / "metrics.json")
    assert loaded.by_length[0].bleu == 20.0 and math.isnan(loaded.by_length[1].bleu)


def test_the_history_row_lists_its_fields_once():
    row = HistoryRow(1, 200, 4.0, 3.9, 2.5, 1000.0, 0.002, 30.0, 0.5, 0)
    assert tuple(row.to_json()) == HISTORY_FIELDS
    assert tuple(row.metrics()) == EPOCH_METRICS
    assert not set(EPOCH_METRICS) & set(HistoryRow.COUNTERS)
    assert HistoryRow.from_json(row.to_json()) == row


# ---------------------------------------------------------------- the tree walk
RECORD_FILES = {"sweep.json", "result.json", "findings.json", "metrics.json"}
CONSTANTS = {"SWEEP_FILE", "FINDINGS", "RESULT", "METRICS"}
MARKERS = CONSTANTS | {"result", "metrics"}
"""What names one of the records' files: its name, the constant that holds it, or the
folder types' properties (``VariantFiles.result``, ``EvalFiles.metrics``)."""
READERS = {"loads", "load", "read_record", "_read_json", "read_json", "write_json"}
"""Calls that read or write a file's JSON as a plain dict."""
JSON_MODULES = {"json", "pd", "pandas"}
TYPED = ("pipeline/records/", "pipeline/study/record.py")
"""The record types: the only modules that read or write those files' JSON."""


def _mentions(node: ast.AST, tainted: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            if any(name in sub.value for name in RECORD_FILES):
                return True
        elif isinstance(sub, ast.Name) and (sub.id in CONSTANTS or sub.id in tainted):
            return True
        elif isinstance(sub, ast.Attribute) and sub.attr in MARKERS:
            return True
    return False


def _own_nodes(scope: ast.AST):
    """The nodes of ``scope`` outside the functions defined in it (each is its own)."""
    for child in ast.iter_child_nodes(scope):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        yield child
        yield from _own_nodes(child)


def raw_record_access(source: str) -> list[int]:
    """Lines where a record file's JSON is read or written as a plain dict: a JSON call
    whose argument names the file, directly or through a variable assigned from it."""
    found = []
    tree = ast.parse(source)
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    top = ast.Module([n for n in tree.body if not isinstance(n, ast.ClassDef)], [])
    for scope in [top, *functions]:
        nodes = list(_own_nodes(scope))
        tainted: set[str] = set()
        for node in nodes:
            if isinstance(node, ast.Assign) and _mentions(node.value, tainted):
                tainted |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in nodes:
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute):  # json.loads, pd.read_json: not Type.load
                owner = func.value.id if isinstance(func.value, ast.Name) else ""
                name = func.attr if owner in JSON_MODULES else ""
            else:
                name = getattr(func, "id", "")
            if name in READERS and node.args and _mentions(node.args[0], tainted):
                found.append(node.lineno)
    return sorted(set(found))


def test_the_walk_finds_a_raw_read_direct_or_through_a_variable():
    source = (
        "import json\n"
        "def a(models):\n"
        "    return json.loads((models / SWEEP_FILE).read_text())['variants']\n"
        "def b(files):\n"
        "    path = files.result\n"
        "    text = path.read_text()\n"
        "    return json.loads(text)['summary']\n"
        "def c(folder):\n"
        "    write_json(folder / 'findings.json', {})\n"
        "def d(folder):\n"
        "    return json.loads((folder / 'corpus.json').read_text())\n"
        "def e(files):\n"
        "    return VariantMetrics.load(files.metrics)\n"
    )
    assert raw_record_access(source) == [3, 7, 9]


def test_no_module_reads_a_record_file_except_through_its_type():
    folders = ("pipeline", "stages", "tools", "benchmarks")
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{line}"
        for folder in folders
        for path in sorted((REPO_ROOT / folder).rglob("*.py"))
        if not str(path.relative_to(REPO_ROOT)).startswith(TYPED)
        for line in raw_record_access(path.read_text())
    ]
    assert not offenders, offenders


def test_records_are_frozen_dataclasses():
    for cls in (HistoryRow, TrainSummary, Trained, VariantRecord, SweepRecord, VariantMetrics):
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls
