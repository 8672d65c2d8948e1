"""``eval/findings.json`` is written and read through one typed record: the committed file
loads and writes back byte for byte, what the study judges survives the round trip, a
malformed file names itself, and the report and the README tool read no key of it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from pipeline.io import write_json
from pipeline.records.base import RecordError
from pipeline.study.record import PartRecord, StudyRecord
from tests.support import REPO_ROOT

COMMITTED = REPO_ROOT / "reports" / "findings.json"


NEWER = {
    "study": {"gates", "design_lock"},
    "family": {"exploratory", "exploratory_level"},
    "finding": {"label", "confirmatory", "exploratory", "change", "gated", "gates"},
    "effect_of_interest": {"published"},
}
"""Fields added with the baseline's gates and the design lock (a file from before them
loads with their defaults)."""


def _without_newer(study: dict) -> dict:
    def drop(data, level):
        return {k: v for k, v in data.items() if k not in NEWER[level]}

    findings = {}
    for decoding, listed in study["findings"].items():
        findings[decoding] = []
        for f in listed:
            effect = f["effect_of_interest"]
            effect = drop(effect, "effect_of_interest") if effect else effect
            findings[decoding].append({**drop(f, "finding"), "effect_of_interest": effect})
    family = drop(study["family"], "family")
    return {**drop(study, "study"), "family": family, "findings": findings}


def test_the_committed_findings_load_and_write_back(tmp_path):
    study = StudyRecord.load(COMMITTED)
    assert study.main and study.main_decoding in study.findings
    # every finding was tested, or says why not
    assert all(f.main is not None or f.verdict == "not testable" for f in study.main)
    assert any(f.main is not None for f in study.main)
    study.write(tmp_path / "findings.json")
    assert StudyRecord.load(tmp_path / "findings.json") == study
    written = json.loads((tmp_path / "findings.json").read_text())
    committed = json.loads(COMMITTED.read_text())
    if "design_lock" in committed:  # written with the gates and the lock: byte for byte
        assert (tmp_path / "findings.json").read_bytes() == COMMITTED.read_bytes()
    else:  # older: every value it holds written back as it was, the newer at defaults
        assert _without_newer(written) == committed
        assert all(f.label == "" and f.confirmatory for f in study.main)


def test_what_the_study_judges_survives_the_round_trip():
    from tests.unit.test_findings_rules import _study, good

    findings, _ = _study(good, seeds=(1, 2))  # some not testable by the design's power
    for finding in findings.values():
        record = finding.record()
        data = json.loads(json.dumps(record.to_json()))
        assert data == finding.summary()
        assert type(record).from_json(data) == record
        assert [p.state for p in record.parts] == [p.state for p in finding.parts]


def test_a_part_without_an_estimate_has_none_of_its_keys():
    part = PartRecord("a - b", "> 0", "undecided", True, 1.0, 0.0, None)
    data = part.to_json()
    assert list(data) == ["label", "claim", "state", "primary", "effect", "margin", "p_adjusted"]
    assert PartRecord.from_json(data) == part


def _broken(tmp_path: Path, change) -> Path:
    data = json.loads(COMMITTED.read_text())
    change(data)
    path = tmp_path / "findings.json"
    write_json(path, data)
    return path


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda d: d.pop("family"), "family"),
        (lambda d: d["findings"]["beam"][0].pop("verdict"), "findings.beam[0]"),
        (lambda d: d["findings"]["beam"][1]["parts"][0].update(mde="wide"), "parts[0]"),
        (lambda d: d.update(findings=[]), "findings"),
    ],
)
def test_a_malformed_file_is_a_record_error_naming_it(tmp_path, change, says):
    path = _broken(tmp_path, change)
    with pytest.raises(RecordError, match=str(path)) as err:
        StudyRecord.load(path)
    assert says in str(err.value)


def test_a_missing_file_says_which_command_makes_it(tmp_path):
    with pytest.raises(RecordError, match="dvc repro evaluate"):
        StudyRecord.load(tmp_path / "findings.json")


FILE_KEYS = {
    *("main_decoding", "reference_chosen_on", "reference_dev_bleu", "power_from"),
    *("excluded_from_confirmatory", "family", "bootstrap", "baseline_ratio"),
    *("decoding_dependent", "findings", "parts", "effect_of_interest", "design"),
    *("literature", "criterion", "verdict", "answer", "why", "p_adjusted", "level"),
    *("planned_se", "seeds_needed", "testable", "interval_level", "measured"),
}
"""Keys only ``findings.json`` has (comparisons.csv and ranking.csv share the others)."""
READERS = [
    *sorted((REPO_ROOT / "pipeline" / "report").glob("*.py")),
    REPO_ROOT / "tools" / "readme_block.py",
]


def key_reads(source: str) -> list[str]:
    """String keys read by ``x["key"]`` or ``x.get("key")``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            found.append(node.slice.value)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.append(node.args[0].value)
    return [key for key in found if isinstance(key, str)]


@pytest.mark.parametrize("path", READERS, ids=lambda p: p.name)
def test_the_report_and_the_readme_read_the_findings_through_the_record(path):
    assert not FILE_KEYS & set(key_reads(path.read_text()))


def test_the_key_check_sees_subscripts_and_gets():
    assert key_reads('f["verdict"]; s.get("findings", {}); t[0]') == ["verdict", "findings"]


def test_the_committed_study_holds_its_gates_and_no_failed_gate_is_read_past():
    """The committed findings hold each decoding's measured gates, and every finding whose
    claim (or the comparison of its size) needs the baseline's gates carries them; where
    one fails, the claim is not testable and no size verdict is given."""
    from pipeline.study.labels import NOT_TESTABLE, SIZE_VERDICTS

    study = StudyRecord.load(COMMITTED)
    assert set(study.gates) == set(study.findings)
    for decoding, gates in study.gates.items():
        assert gates and all(g.result in ("pass", "fail") for g in gates), decoding
        for finding in study.findings[decoding]:
            assert bool(finding.gates) == bool(finding.gated), finding.title
            if not any(g.result == "fail" for g in finding.gates):
                continue
            if finding.gated == "claim":
                assert finding.verdict == NOT_TESTABLE, (decoding, finding.title)
            assert finding.verdict not in SIZE_VERDICTS, (decoding, finding.title)
