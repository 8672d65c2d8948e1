"""The report and the README's results show each baseline gate with its values and
result, the design lock (hash, commit, declared time, training start, whether the one
preceded the other), and state the interval level and the scale of every verdict row."""

from __future__ import annotations

import shutil

import pytest

from pipeline.config.params import Config
from pipeline.report.pages import render_markdown
from pipeline.study.design import build_lock, check
from pipeline.study.findings import measured_gates
from pipeline.study.record import Family, StudyRecord
from tests.support import REPO_ROOT, study_record
from tests.unit.test_findings_rules import _study
from tests.unit.test_gates import floor
from tests.unit.test_report_pages import context
from tools.readme_block import render

STARTED = "2025-03-01T12:00:00+00:00"


@pytest.fixture(scope="module")
def gated(tmp_path_factory) -> StudyRecord:
    """A study whose baseline is at a share of 0.2 of attention's BLEU, its design
    locked when training started and unchanged since."""
    lock = build_lock(Config(), STARTED, tmp_path_factory.mktemp("checkout"))
    checked = check(lock, Config())
    findings, _ = _study(floor(4.0), design_status=checked.status)
    listed = list(findings.values())
    size = sum(1 for f in listed for p in f.parts if p.primary)
    return study_record(
        [f.record() for f in listed],
        ratio=0.2,
        family=Family(size, "Bonferroni", 0.05, 1 - 0.05 / size),
        gates={"beam": tuple(g.record() for g in measured_gates(listed))},
        design_lock=checked.record(),
    )


def test_the_report_shows_each_gate_and_the_lock(gated):
    text = render_markdown(context(study=gated))
    assert "### Baseline gates" in text
    gates = text.split("### Baseline gates", 1)[1]
    assert "| baseline reaches a share of attention |" in gates
    assert "| at least 0.324 of additive's BLEU | 0.2" in gates and "| fail |" in gates
    assert "Attention (its size only), Length, Reversal" in gates
    assert "| baseline uses its source |" in gates and "| pass |" in gates
    assert "| Length | not testable (the baseline is at the floor) |" in text
    assert "estimate [98.8% CI, Bonferroni over 4] | scale |" in text
    assert "locked at commit unknown; declared at an unknown time" in text
    assert STARTED in text


def test_the_readme_block_lists_the_gates_the_level_and_the_scale(gated, tmp_path):
    for name in ("metrics/test.json", "reports/ranking.csv"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    gated.write(tmp_path / "reports" / "findings.json")
    block = render(tmp_path)
    assert "| estimate [98.8% CI, Bonferroni over 4] | scale | MDE (at the interval's level) |" in (
        block
    )
    assert "| Length | not testable (the baseline is at the floor) | - |" in block
    assert "| log BLEU |" in block  # Length's scale
    assert "| baseline reaches a share of attention | at least 0.324 of additive's BLEU |" in (
        block
    )
    assert "Design " in block and "judged without the baseline's gates" not in block
