"""The tracking outbox on a real SQLite store: records arrive once, replays add nothing,
a run a live writer owns is never reopened by another, and fresh stores open in parallel."""

import multiprocessing
import shutil
import uuid

import pytest

from pipeline.config.infra import InfraFile, TrackingConfig, resolve
from pipeline.tracking.outbox import Outbox, _short, pending_journals, writer_alive
from pipeline.tracking.store import UNFINISHED, WRITER_TAG, Tracker
from pipeline.translate.mlflow_model import save_pyfunc


def infra_at(root):
    return resolve(InfraFile(tracking=TrackingConfig(experiment="unit")), root, "test infra")


@pytest.fixture
def tracker(tmp_path, monkeypatch):
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "DVC_EXP_NAME"):
        monkeypatch.delenv(key, raising=False)
    return Tracker(infra_at(tmp_path))


def _train_records(outbox: Outbox, variant, finish: bool = True) -> None:
    """A sweep's records for one trained variant (``variant``: its folder)."""
    files = [variant / n for n in ("checkpoint.pt", "config.json", "src.model", "tgt.model")]
    model_dir = save_pyfunc(files, variant.parent / f"pyfunc-{uuid.uuid4().hex[:8]}")
    outbox.start_run("sweep", "sweep-1", {"kind": "sweep", "grid_hash": "g"}, reuse=UNFINISHED)
    outbox.start_run(
        "train:h",
        "additive-s1",
        {"kind": "train", "config_hash": "h"},
        reuse=UNFINISHED,
        parent="sweep",
        params={"model.scorer": "additive"},
    )
    for step in (200, 400, 600):
        outbox.log_metrics("train:h", {"dev_loss": 3.0 - step / 1000}, step=step)
    outbox.set_tags("train:h", {"stop_reason": "early_stopping"})
    outbox.log_model("train:h", "additive-s1", model_dir, step=400, params={}, tags={})
    if finish:
        outbox.finish("train:h")
        outbox.finish("sweep")


def _train_runs(tracker):
    return tracker._search({"kind": "train"}, 100)


def test_records_reach_mlflow_once_and_the_journal_is_removed(
    tracker, tmp_path, tiny_variant_folder
):
    outbox = Outbox(tracker, tmp_path / "cache")
    _train_records(outbox, tiny_variant_folder)
    assert outbox.close(60) == 0
    assert not pending_journals(tmp_path / "cache")
    (run,) = _train_runs(tracker)
    history = tracker.client.get_metric_history(run.info.run_id, "dev_loss")
    assert [m.step for m in history] == [200, 400, 600]
    assert run.info.status == "FINISHED" and run.data.tags["stop_reason"] == "early_stopping"
    assert run.data.tags["mlflow.parentRunId"] == outbox.run_ids()["sweep"]
    models = tracker.client.search_logged_models([tracker.experiment_id])
    assert [m.source_run_id for m in models] == [run.info.run_id]


def test_a_journal_replayed_after_a_crash_adds_nothing(tracker, tmp_path, tiny_variant_folder):
    """A writer killed after sending but before counting: the next process replays every
    record; runs, metric steps and logged models still appear once."""
    cache = tmp_path / "cache"
    outbox = Outbox(tracker, cache)
    _train_records(outbox, tiny_variant_folder)
    saved = tmp_path / "saved"
    while outbox.journal.pending():  # everything sent, nothing counted in the copy
        outbox._wake.set()
        outbox._thread.join(0.1)
    shutil.copytree(outbox.journal.folder, saved, ignore=shutil.ignore_patterns("lock", ".*.tmp"))
    assert outbox.close(60) == 0
    (saved / "sent").unlink()
    (saved / "runs.json").unlink()
    shutil.copytree(saved, cache / "tracking" / outbox.journal.name)

    again = Outbox(tracker, cache)  # adopts the orphan and replays it
    assert [j.name for j in again.orphans] == [outbox.journal.name]
    assert again.close(60) == 0 and not pending_journals(cache)
    (run,) = _train_runs(tracker)
    history = tracker.client.get_metric_history(run.info.run_id, "dev_loss")
    assert [m.step for m in history] == [200, 400, 600]
    assert len(tracker.client.search_logged_models([tracker.experiment_id])) == 1
    assert len(tracker._search({"kind": "sweep"}, 100)) == 1


def test_a_run_a_live_writer_owns_is_never_reopened(tracker, tmp_path, tiny_variant_folder):
    cache = tmp_path / "cache"
    first = Outbox(tracker, cache)
    _train_records(first, tiny_variant_folder, finish=False)  # RUNNING, its writer alive
    while first.journal.pending():
        first._thread.join(0.1)
    owner = tracker.client.get_run(first.run_ids()["train:h"]).data.tags[WRITER_TAG]
    assert owner == first.journal.name and writer_alive(cache / "tracking", owner)

    second = Outbox(tracker, cache)  # a parallel experiment training the same variant
    second.start_run(
        "train:h", "additive-s1", {"kind": "train", "config_hash": "h"}, reuse=UNFINISHED
    )
    assert second.close(60) == 0
    assert second.run_ids()["train:h"] != first.run_ids()["train:h"]

    assert first.close(60) == 0  # the writer ends: its RUNNING run may be continued
    assert not writer_alive(cache / "tracking", owner)
    third = Outbox(tracker, cache)
    third.start_run(
        "train:h", "additive-s1", {"kind": "train", "config_hash": "h"}, reuse=UNFINISHED
    )
    assert third.close(60) == 0
    assert third.run_ids()["train:h"] in (first.run_ids()["train:h"], second.run_ids()["train:h"])


def test_a_record_the_store_refuses_is_set_aside_not_retried_forever(tracker, tmp_path):
    outbox = Outbox(tracker, tmp_path / "cache")
    outbox.start_run("r", "r", {"kind": "train", "config_hash": "x"}, params={"a": 1})
    outbox.log_metrics("never-started", {"x": 1.0})  # no such run: refused
    outbox.set_tags("r", {"after": "yes"})
    refused = outbox.journal.folder / "refused.jsonl"
    while outbox.journal.pending():
        outbox._thread.join(0.1)
    assert refused.read_text().count("never-started") == 1
    assert outbox.close(60) == 0
    (run,) = _train_runs(tracker)
    assert run.data.tags["after"] == "yes"


def _open_store(root: str) -> str:
    from pathlib import Path

    return Tracker(infra_at(Path(root))).experiment_id


def test_processes_opening_a_fresh_sqlite_store_at_once_all_succeed(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        ids = pool.map(_open_store, [str(tmp_path)] * 3)
    assert len(set(ids)) == 1  # one experiment, no schema or creation race


def test_a_sweep_that_fails_after_training_ends_its_parent_run_failed(tracker, tmp_path):
    """An error once the sweep's outbox is open (writing models/sweep.json, say) ends the
    MLflow parent run FAILED and sends every record: nothing is left RUNNING."""
    from pipeline.sweep.driver import SWEEP_REF, Training

    training = Training(infra_at(tmp_path), paths=None, data=None, specs={}, grid={})
    training.outbox = Outbox(tracker, tmp_path / "cache")
    training.outbox.start_run(SWEEP_REF, "sweep-1", {"kind": "sweep"}, reuse=UNFINISHED)
    training.outbox.log_metrics(SWEEP_REF, {"variants_finished": 3})
    training.abort()
    (run,) = tracker._search({"kind": "sweep"}, 10)
    assert run.info.status == "FAILED"
    assert run.data.metrics["variants_finished"] == 3
    assert not pending_journals(tmp_path / "cache")


def test_an_abort_that_cannot_end_the_run_logs_and_leaves_the_first_error(
    tracker, tmp_path, monkeypatch, caplog
):
    """abort() runs while another error is raised: its own failure is logged, not raised
    in the first error's place."""
    from pipeline.sweep.driver import SWEEP_REF, Training

    training = Training(infra_at(tmp_path), paths=None, data=None, specs={}, grid={})
    training.outbox = Outbox(tracker, tmp_path / "cache")
    training.outbox.start_run(SWEEP_REF, "sweep-1", {"kind": "sweep"}, reuse=UNFINISHED)

    def full_disk(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(training.outbox, "finish", full_disk)
    with pytest.raises(KeyError, match="the first error"):
        try:
            raise KeyError("the first error")
        except KeyError:
            training.abort()
            raise
    assert "could not be ended as FAILED" in caplog.text
    assert "No space left on device" in caplog.text


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "API request to http://127.0.0.1:5/api/2.0/mlflow/runs/log-batch failed with "
            "exception HTTPConnectionPool(host='127.0.0.1', port=5): Max retries exceeded with "
            "url: /api (Caused by NewConnectionError('...: [Errno 111] Connection refused'))",
            "Connection refused",
        ),
        (
            "API request to endpoint /api/2.0/mlflow/runs/log-batch failed with error code 503 "
            "!= 200. Response body: 'Service Unavailable'",
            "HTTP 503",
        ),
    ],
)
def test_an_outage_is_named_by_its_cause(message, expected):
    assert _short(RuntimeError(message)) == expected


def test_an_unknown_cause_is_cut_at_a_word_not_mid_word():
    words = "Max retries exceeded with url " * 20
    short = _short(RuntimeError(words))
    assert len(short) <= 160 and short.endswith(" ...")
    assert short[: -len(" ...")].split()[-1] in words.split()
