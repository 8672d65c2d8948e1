"""A full disk, piece by piece: every write names its path and the space it needed in one
line, leaves nothing half-written, and the sweep's parts stop, record and close on it.
(The whole stage on a full disk: tests/e2e/test_disk_full.py.)"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from collections import namedtuple
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.io import (
    DiskFullError,
    atomic_dir,
    is_disk_full,
    link_or_copy,
    write_bytes,
    write_json,
)

Usage = namedtuple("Usage", "total used free")


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _other_device(*args, **kwargs):
    raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))


def _free(monkeypatch, free: int) -> None:
    """Every filesystem reports ``free`` bytes free."""
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**9, 10**9 - free, free))


# ---------------------------------------------------------------------------- io
def test_a_write_on_a_full_disk_is_one_line_naming_the_file_and_leaves_no_part(
    tmp_path, monkeypatch
):
    target = tmp_path / "models" / "sweep.json"
    write_json(target, {"old": 1})
    _free(monkeypatch, 2_000)
    monkeypatch.setattr(Path, "write_bytes", _enospc)
    with pytest.raises(DiskFullError) as caught:
        write_bytes(target, b"x" * 5_000)
    line = str(caught.value)
    assert "\n" not in line and caught.value.path == target
    assert line == f"no space left on device for {target} (2.0 KB free there, 5.0 KB needed)"
    assert target.read_text() == '{\n  "old": 1\n}\n'  # the previous file, untouched
    assert sorted(p.name for p in target.parent.iterdir()) == ["sweep.json"]


def test_a_folder_that_fills_the_disk_names_the_folder_and_what_it_had_written(
    tmp_path, monkeypatch
):
    dest = tmp_path / "eval"
    (dest / "old").mkdir(parents=True)
    _free(monkeypatch, 100)
    with pytest.raises(DiskFullError) as caught:
        with atomic_dir(dest) as tmp:
            (tmp / "metrics.json").write_bytes(b"x" * 3_000)
            with (tmp / "hypotheses.txt").open("w") as handle:
                handle.write("a")
                _enospc()
    assert caught.value.path == dest
    assert "100 B free there, more than 3.0 KB needed" in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval"]  # no temporary left
    assert (dest / "old").is_dir()


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
        shutil.Error([("a", "b", "[Errno 28] No space left on device: 'a' -> 'b'")]),
        OSError(28, "Error writing bytes to file. Detail: [errno 28] No space left on device"),
        RuntimeError("(sqlite3.OperationalError) database or disk is full"),
    ],
)
def test_a_full_disk_is_recognised_however_it_is_worded(error):
    assert is_disk_full(error)
    try:
        try:
            raise error
        except Exception as inner:
            raise RuntimeError("unexpected pos 576 vs 534") from inner
    except RuntimeError as outer:
        assert is_disk_full(outer)  # under another error (torch's writer says no more)


def test_other_errors_are_not_a_full_disk():
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not is_disk_full(RuntimeError("boom"))


def test_copies_are_refused_whole_before_writing_when_they_do_not_fit(tmp_path, monkeypatch):
    sources = []
    for name in ("checkpoint.pt", "config.json"):
        sources.append(tmp_path / name)
        sources[-1].write_bytes(b"x" * 4_000)
    monkeypatch.setattr(os, "link", _other_device)
    _free(monkeypatch, 5_000)
    folder = tmp_path / "cache"
    with pytest.raises(DiskFullError, match=r"5.0 KB free there, 8.0 KB needed"):
        link_or_copy([(s, folder / s.name) for s in sources], folder)
    assert not any(folder.iterdir())


# ------------------------------------------------------------------- the journal
@pytest.fixture
def journal(tmp_path):
    from pipeline.tracking.outbox import Journal

    return Journal.create(tmp_path / "tracking")


def test_a_record_the_disk_has_no_room_for_leaves_the_journal_as_it_was(journal, monkeypatch):
    journal.append({"op": "tags", "ref": "a", "tags": {}})
    real_write = os.write
    writes = []

    def half_then_full(fd, data):  # a full disk: part of the line, then ENOSPC
        writes.append(data)
        if len(writes) == 1:
            real_write(fd, data[: len(data) // 2])
            return len(data) // 2
        _enospc()

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(DiskFullError, match="records.jsonl"):
        journal.append({"op": "tags", "ref": "b", "tags": {}})
    monkeypatch.setattr(os, "write", real_write)
    journal.append({"op": "tags", "ref": "c", "tags": {}})
    assert [r["ref"] for r in journal.records()] == ["a", "c"]  # nothing hidden


def test_a_snapshot_the_disk_has_no_room_for_leaves_nothing(journal, tmp_path, monkeypatch):
    model = tmp_path / "model"
    (model / "code").mkdir(parents=True)
    (model / "code" / "a.py").write_text("x" * 3_000)
    (model / "MLmodel").write_text("y")
    monkeypatch.setattr(os, "link", _other_device)  # not linkable: copied
    monkeypatch.setattr(shutil, "copy2", _enospc)
    with pytest.raises(DiskFullError, match=f"for {journal.folder / 'files' / 'k1'}"):
        journal.snapshot("k1", [model])
    assert not (journal.folder / "files" / "k1").exists()


def test_the_journal_bookkeeping_that_finds_no_room_stays_right_in_memory(journal, monkeypatch):
    monkeypatch.setattr("pipeline.tracking.outbox.write_text", lambda *a: _enospc())
    monkeypatch.setattr("pipeline.tracking.outbox.write_json", lambda *a: _enospc())
    journal.mark_sent(3)
    journal.set_run("train:h", "run-1")
    assert journal.sent == 3 and journal.runs == {"train:h": "run-1"}


# ------------------------------------------------------------------- MLflow runs
@pytest.fixture
def tracker(tmp_path, monkeypatch):
    from pipeline.config.infra import InfraFile, TrackingConfig, resolve
    from pipeline.tracking.store import Tracker

    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "DVC_EXP_NAME"):
        monkeypatch.delenv(key, raising=False)
    infra = resolve(InfraFile(tracking=TrackingConfig(experiment="unit")), tmp_path, "test")
    return Tracker(infra)


def test_a_run_left_running_by_a_writer_now_gone_is_closed_and_a_live_ones_is_not(
    tracker, tmp_path
):
    """The journal's end record of a variant's run was lost (a full disk, a kill): the
    next stage that knows the variant finished ends it; a run its own process still
    writes stays open."""
    from pipeline.tracking.outbox import Outbox
    from pipeline.tracking.store import CLOSED_TAG, HOST, WRITER_TAG

    key = {"kind": "train", "config_hash": "h"}
    gone = tracker.start_run("v", tags={**key, WRITER_TAG: f"123-0dead@{HOST}"})
    outbox = Outbox(tracker, tmp_path / "cache")
    mine = tracker.start_run("v", tags={**key, WRITER_TAG: outbox.journal.name})
    outbox.close_stale(key, "FINISHED", "taken from the variant cache")
    assert outbox.close(30) == 0
    runs = {r.info.run_id: r for r in tracker._search(key, 10)}
    assert runs[gone].info.status == "FINISHED"
    assert runs[gone].data.tags[CLOSED_TAG] == "taken from the variant cache"
    assert runs[mine].info.status == "RUNNING"  # its writer (the outbox) was alive then


def test_evaluate_ends_open_training_runs_by_the_variants_recorded_outcome(tracker):
    from pipeline.evaluate.registry import close_training_runs
    from pipeline.records.sweep import FAILED, SweepRecord
    from tests.support import variant_record

    finished = variant_record("a-s1")
    error = "DiskFullError: no space left on device for /x"
    failed = replace(variant_record("a-s2"), status=FAILED, summary=None, error=error)
    ids = {
        r.id: tracker.start_run(r.id, tags={"kind": "train", "config_hash": r.config_hash})
        for r in (finished, failed)
    }
    close_training_runs(tracker, SweepRecord("d", {r.id: r for r in (finished, failed)}))
    ended = {i: tracker.client.get_run(run) for i, run in ids.items()}
    assert ended["a-s1"].info.status == "FINISHED"
    assert ended["a-s2"].info.status == "FAILED"
    assert ended["a-s2"].data.tags["error"].startswith("DiskFullError: no space left")


# ---------------------------------------------------------------------- the sweep
def test_the_disk_watch_stops_the_sweep_at_the_first_failure():
    from pipeline.sweep.callbacks import DiskWatch

    watch = DiskWatch()
    assert not watch.stop_all()
    first, second = DiskFullError("/a", 0, 10), DiskFullError("/b", 0, 10)
    watch.report(first)
    watch.report(second)
    assert watch.stop_all() and watch.error is first


def test_a_trials_full_disk_is_found_under_rays_wrappers_or_in_its_text():
    from pipeline.sweep.callbacks import trial_disk_full

    raised = DiskFullError("/storage/trial", 1_000, 9_000)
    wrapped = SimpleNamespace(cause=SimpleNamespace(cause=raised))
    found = trial_disk_full(wrapped, "/where")
    assert (found.path, found.free, found.needed) == (Path("/storage/trial"), 1_000, 9_000)
    text = "Traceback ...\nOSError: [Errno 28] No space left on device: '/tmp/x/last.pt'\n"
    assert trial_disk_full(text, "/where").path == Path("/tmp/x/last.pt")
    assert trial_disk_full("Traceback ...\nValueError: boom\n", "/where") is None


def test_a_resume_record_the_disk_has_no_room_for_keeps_the_previous_checkpoint(tmp_path):
    from pipeline.sweep.callbacks import DiskWatch, OutputsCallback

    def no_room(*args):
        raise DiskFullError(tmp_path / "resume", 0)

    deleted = []
    previous = SimpleNamespace(
        path="/ckpt/0", filesystem=SimpleNamespace(delete_dir=deleted.append)
    )
    cache = SimpleNamespace(set_resume=no_room)
    spec = SimpleNamespace(config_hash="h", variant=SimpleNamespace(id="v"))
    watch = DiskWatch()
    outputs = OutputsCallback({"v": spec}, tmp_path, cache, {}, watch)
    outputs.latest["v"] = previous
    trial = SimpleNamespace(config={"variant": "v"})
    outputs.on_checkpoint(0, [], trial, SimpleNamespace(path="/ckpt/1", filesystem=None))
    assert watch.stop_all() and deleted == [] and outputs.latest["v"] is previous


def test_a_training_error_on_a_full_scratch_disk_is_named_as_one(tmp_path, monkeypatch):
    from pipeline.sweep.trial import SCRATCH_MARGIN, _full_scratch

    assert _full_scratch(OSError(errno.ENOSPC, "No space"), tmp_path).path == tmp_path
    torch_error = RuntimeError("[enforce fail at inline_container.cc:672] unexpected pos")
    _free(monkeypatch, SCRATCH_MARGIN // 2)
    assert "needed" in str(_full_scratch(torch_error, tmp_path))
    _free(monkeypatch, 10 * SCRATCH_MARGIN)
    assert _full_scratch(torch_error, tmp_path) is None


def test_the_space_check_warns_with_how_many_fit_and_refuses_when_none_does(
    tmp_path, tiny_tok_dir, make_variant, monkeypatch, caplog
):
    from pipeline.config.infra import InfraFile, resolve
    from pipeline.data.dataset import TokenizedData
    from pipeline.sweep.space import DiskSpaceError, plan_space

    infra = resolve(InfraFile(), tmp_path, "test")
    variants = [make_variant(seed=s) for s in (1, 2, 3)]
    plan = plan_space(
        variants, TokenizedData.load(tiny_tok_dir), infra, tmp_path / "models", "s3://b/r", 1
    )
    (disk,) = plan.disks()  # one filesystem here: all on it
    labels = [w.label for w in disk]
    assert "Tune checkpoints" not in labels  # in s3: not this machine's disk
    each = sum(w.kept.get(variants[0].id, 0) for w in disk)
    transient = sum(w.transient for w in disk)
    assert plan.needed(tmp_path, [v.id for v in variants]) == transient + 3 * each

    monkeypatch.setattr("pipeline.sweep.space.free_bytes", lambda path: transient + 2 * each)
    with caplog.at_level(logging.WARNING, logger="pipeline.sweep.space"):
        plan.check()
    (warning,) = caplog.records
    assert "the 3 variants to train write about" in warning.getMessage()
    assert "about 2 fit" in warning.getMessage()
    monkeypatch.setattr("pipeline.sweep.space.free_bytes", lambda path: each)
    with pytest.raises(DiskSpaceError, match="but one variant writes about"):
        plan.check()


def test_the_summary_line_comes_before_the_error_when_the_run_log_cannot_be_written(
    tmp_path, caplog
):
    """The sweep's own bookkeeping finds no space: the stage still logs its summary
    (naming what was not written), then raises that one failure."""
    from pipeline.sweep.cache import VariantCache
    from pipeline.sweep.outcomes import VariantOutcome, conclude
    from pipeline.sweep.trial import TrialSpec
    from tests.support import variant_record

    record = variant_record("none-fwd-h16-s1", scorer="none")
    spec = TrialSpec(
        SimpleNamespace(id=record.id, axes=record.axes, model=record.model, train=record.train),
        record.config_hash,
        None,
    )
    cache = VariantCache(tmp_path / "cache")
    full = DiskFullError(cache.last_sweep, 0, 900)

    def no_room(log):
        raise full

    cache.write_last_sweep = no_room
    paths = SimpleNamespace(models_dir=tmp_path / "models", cache=cache)
    data = SimpleNamespace(fingerprint=lambda: "d", files={"src.model": b"s", "tgt.model": b"t"})
    (paths.models_dir / record.id).mkdir(parents=True)
    outcome = VariantOutcome(record, "cached")
    with caplog.at_level(logging.INFO, logger="pipeline.sweep.outcomes"):
        with pytest.raises(DiskFullError) as caught:
            conclude(paths, data, {record.id: spec}, {record.id: outcome}, None, False, 0.0)
    assert caught.value is full
    (summary,) = [r.getMessage() for r in caplog.records if "sweep" in r.getMessage()]
    assert summary.startswith("sweep stopped: {'finished': 1")
    assert f"{cache.last_sweep} not written" in summary
    assert f"summary in {paths.models_dir / 'sweep.json'}" in summary
