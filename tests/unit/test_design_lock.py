"""The design, locked when training starts (``models/design.json``): its hash and
declarations round-trip; a declaration unchanged since is confirmatory, one changed after
training started is flagged with the change and left out of the primary family, and a
study without a lock is exploratory throughout."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace

import pytest

from pipeline.config.params import Config
from pipeline.records.base import RecordError
from pipeline.study.declarations import EFFECTS
from pipeline.study.design import (
    DESIGN_FILE,
    NOT_LOCKED,
    DesignLock,
    build_lock,
    check,
    declared_design,
    design_hash,
    load_lock,
    lock_design,
)
from pipeline.study.statistics import ALPHA
from tests.unit.test_findings_rules import _study, good

STARTED = "2025-03-01T12:00:00+00:00"


def config(**train) -> Config:
    return Config(train=Config().train.model_copy(update=train)) if train else Config()


def test_the_design_holds_what_each_finding_declares_and_the_grid():
    design = declared_design(config())
    attention = design["findings"]["Attention"]
    assert attention["effect"]["value"] == 7.57 and attention["effect"]["published"]
    assert attention["gates"]["applies"] == "size"
    assert [g["threshold"] for g in attention["gates"]["gates"]] == [2.52, 0.324]
    assert attention["seeds"] == {"additive-fwd-h256": 3, "none-fwd-h256": 2}
    assert attention["exploratory"] is None
    assert design["findings"]["Length"]["exploratory"].startswith("its claim needs")
    assert design["findings"]["Scorer"]["effect"]["published"] is False  # margin declared here
    assert design["grid"]["stopping"] == {
        "patience": 4,
        "min_learning_rate": 0.0003,
        "converged_slope": 0.5,
        "converged_window": 2000,
        "max_steps": 9000,
    }
    assert design["grid"]["seeds"]["general-fwd-h256"] == 3
    assert re.fullmatch(r"[0-9a-f]{64}", design_hash(design))
    assert design_hash(design) == design_hash(declared_design(config()))
    assert design_hash(design) != design_hash(declared_design(config(max_steps=8000)))


def test_a_lock_reads_back_as_written(tmp_path):
    lock = build_lock(config(), STARTED, tmp_path)  # not a git checkout: times unknown
    assert lock.training_started == STARTED and lock.commit == "unknown"
    assert lock.declared_at is None and lock.preceded is None
    lock.write(tmp_path / DESIGN_FILE)
    assert load_lock(tmp_path) == lock and DesignLock.load(tmp_path / DESIGN_FILE) == lock
    assert load_lock(tmp_path / "nothing") is None
    (tmp_path / DESIGN_FILE).write_text('{"hash": 3}')
    with pytest.raises(RecordError, match=DESIGN_FILE):
        load_lock(tmp_path)


def test_an_unchanged_declaration_is_confirmatory(tmp_path):
    lock = lock_design(config(), tmp_path, STARTED, root=tmp_path)
    checked = check(lock, config())
    assert checked.exploratory == {} and checked.current_hash == lock.hash
    record = checked.record()
    assert record.locked and record.changed == () and record.hash == lock.hash
    findings, _ = _study(good, design_status=checked.status)
    assert all(f.confirmatory for f in findings.values())
    primary = [p for f in findings.values() for p in f.parts if p.primary]
    assert all(p.estimate.alpha == pytest.approx(ALPHA / 4) for p in primary)


def test_an_effect_changed_after_training_started_is_exploratory_with_the_change(
    tmp_path, monkeypatch
):
    lock = lock_design(config(), tmp_path, STARTED, root=tmp_path)
    monkeypatch.setitem(EFFECTS, "Attention", replace(EFFECTS["Attention"], value=5.0))
    checked = check(lock, config())
    assert set(checked.exploratory) == {"Attention"}
    why, change = checked.exploratory["Attention"]
    assert why == "its declaration changed after training started"
    assert change.changes == ("effect.value: 7.57 -> 5.0",)
    assert json.loads(change.locked)["effect"]["value"] == 7.57
    assert json.loads(change.current)["effect"]["value"] == 5.0
    assert checked.record().changed == ("Attention",) and checked.current_hash != lock.hash

    findings, _ = _study(good, design_status=checked.status)
    attention = findings["Attention"]
    assert not attention.confirmatory and attention.change == change
    assert "exploratory: its declaration changed after training started" in attention.label
    assert attention.main.p_adjusted != attention.main.p_adjusted  # nan: not in the family
    confirmatory = [p for f in findings.values() if f.confirmatory for p in f.parts if p.primary]
    assert len(confirmatory) == 3  # Length, Reversal, Scorer: the family without Attention
    assert all(p.estimate.alpha == pytest.approx(ALPHA / 3) for p in confirmatory)
    assert attention.main.estimate.alpha == pytest.approx(ALPHA / 4)  # the declared level
    record = attention.record()
    assert not record.confirmatory and record.change.changes == change.changes


def test_without_a_lock_every_finding_says_the_design_was_not_locked():
    checked = check(None, config())
    assert checked.status("Attention") == (NOT_LOCKED, None)
    assert not checked.record().locked and NOT_LOCKED in checked.record().status
    findings, _ = _study(good, design_status=checked.status)
    for finding in findings.values():
        assert not finding.confirmatory
        assert f"exploratory: {NOT_LOCKED}" in finding.label


def test_an_existing_lock_is_kept_while_the_grid_is_unchanged(tmp_path, monkeypatch):
    models, cache = tmp_path / "models", tmp_path / "cache"
    first = lock_design(config(), models, STARTED, cache_dir=cache, root=tmp_path)
    monkeypatch.setitem(EFFECTS, "Reversal", replace(EFFECTS["Reversal"], value=1.0))
    again = lock_design(config(), models, "2025-03-02T00:00:00+00:00", cache, tmp_path)
    assert again == first  # the findings changed, not the grid: the first start stands
    shutil.rmtree(models)  # DVC may delete models/ before the train stage runs
    kept = lock_design(config(), models, "2025-03-03T00:00:00+00:00", cache, tmp_path)
    assert kept == first and load_lock(models) == first
    grown = lock_design(config(max_steps=8000), models, "2025-03-04T00:00:00+00:00", cache)
    assert grown.training_started == "2025-03-04T00:00:00+00:00" and grown.hash != first.hash


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_declared_time_is_the_last_commit_of_the_declaration(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "params.yaml").write_text("train: {}\n")
    git("add", "params.yaml")
    env = ["-c", "user.name=t", "-c", "user.email=t@t"]
    git(*env, "commit", "-q", "-m", "declare", "--date", "2025-01-01T00:00:00+00:00")
    subprocess.run(
        ["git", *env, "commit", "-q", "--amend", "--no-edit"],
        cwd=tmp_path,
        check=True,
        env={"GIT_COMMITTER_DATE": "2025-01-01T00:00:00+00:00", "PATH": "/usr/bin:/bin"},
    )
    lock = build_lock(config(), STARTED, tmp_path)
    assert lock.declared_at == "2025-01-01T00:00:00+00:00" and lock.preceded is True
    assert lock.dirty is False and re.fullmatch(r"[0-9a-f]{40}", lock.commit)
    (tmp_path / "params.yaml").write_text("train: {patience: 3}\n")  # uncommitted
    dirty = build_lock(config(), STARTED, tmp_path)
    assert dirty.declared_at == STARTED and "uncommitted changes to params.yaml" in (
        dirty.declared_from
    )
    assert dirty.dirty is True


def test_findings_json_holds_the_lock_the_gates_and_the_family_without_exploratory_parts(
    tmp_path,
):
    """What the evaluate stage writes (:class:`StudyFindings.record`): the lock's hash,
    commit, declared time and training start; each decoding's gates; the family of the
    confirmatory findings only."""
    import pandas as pd

    from pipeline.evaluate.verdicts import StudyFindings
    from pipeline.study.record import StudyRecord

    lock = build_lock(config(), STARTED, tmp_path)
    changed = replace(lock, declarations={**lock.declarations, "Scorer": "{}"})
    checked = check(changed, config())
    findings, _ = _study(good, design_status=checked.status)
    study = StudyFindings(
        "beam", "additive", {}, {"beam": list(findings.values())}, pd.DataFrame(), {}, [],
        design=checked,
    )  # fmt: skip
    record = study.record()
    assert record.design_lock.hash == lock.hash and record.design_lock.changed == ("Scorer",)
    assert record.design_lock.training_started == STARTED
    assert record.family.size == 3 and record.family.exploratory == 1
    assert record.family.describe() == "98.3% CI, Bonferroni over 3"
    assert {g.name for g in record.gates["beam"]} == {
        "baseline uses its source",
        "baseline reaches a share of attention",
    }
    record.write(tmp_path / "findings.json")
    assert StudyRecord.load(tmp_path / "findings.json") == record


def test_a_run_that_trains_nothing_keeps_the_lock_and_makes_none_up(tmp_path):
    from pipeline.config.params import Config
    from pipeline.study.design import DESIGN_FILE, keep_lock, lock_design

    config, models, cache = Config(), tmp_path / "models", tmp_path / "cache"
    assert keep_lock(config, models, cache) is None and not (models / DESIGN_FILE).exists()
    locked = lock_design(config, models, 1_000.0, cache, root=tmp_path)
    (models / DESIGN_FILE).unlink()  # DVC deletes models/ before the train stage reruns
    assert keep_lock(config, models, cache) == locked
    assert (models / DESIGN_FILE).is_file()
