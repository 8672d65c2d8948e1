"""Seeds by power (``python -m pipeline.study.plan``): the default grid gives each
configuration a confirmatory finding compares the seeds its a-priori power needs and no
more; a finding declared exploratory before training (``evaluate.exploratory``) plans no
seeds, is left out of the confirmatory family and says so; a title that names no finding
is one error."""

from __future__ import annotations

import pytest
import yaml

from pipeline.config import load_config
from pipeline.config.grid import expand_grid
from pipeline.config.params import Config, ConfigError
from pipeline.study import plan as seed_plan
from pipeline.study.design import declared_design
from pipeline.study.findings import DECLARED_EXPLORATORY
from pipeline.study.statistics import ALPHA, POWER
from tests.support import REPO_ROOT
from tests.unit.test_findings_rules import _study, good


def test_the_default_grid_gives_each_confirmatory_configuration_the_seeds_its_power_needs():
    config = load_config(REPO_ROOT / "params.yaml")
    plans = seed_plan.plan(config)
    assert {p.finding for p in plans if p.confirmatory} == {"Attention", "Scorer", "Hidden size"}
    assert seed_plan.underpowered(plans) == []
    assert all(p.power >= POWER for p in plans if p.confirmatory)
    needed = seed_plan.needed_seeds(plans)
    for p in plans:
        for configuration, have in p.seeds.items():
            if needed[configuration] >= 2:  # compared by a confirmatory finding: exactly
                assert have == needed[configuration], (p.finding, configuration)
    # configurations no confirmatory finding compares: one seed (exploratory) at most
    confirmatory = {c for c, n in needed.items() if n >= 2}
    counts: dict[str, int] = {}
    for v in expand_grid(config):
        order = "rev" if v.model.reverse_source else "fwd"
        key = f"{v.model.scorer}-{order}-h{v.model.hidden_size}"
        counts[key] = counts.get(key, 0) + 1
    assert {c: n for c, n in counts.items() if c not in confirmatory and n > 1} == {}
    assert set(confirmatory) <= set(counts)


def test_too_few_seeds_for_a_confirmatory_finding_are_flagged(tmp_path, capsys):
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["train"]["grid"] = {
        "scorer": ["none", "additive", "general"],
        "seed": [1, 2],
        "include": [{"scorer": ["additive"], "hidden_size": [128], "seed": [1, 2]}],
    }
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    assert seed_plan.main([str(path)]) == 1
    out = capsys.readouterr().out
    scorer = next(line for line in out.splitlines() if line.startswith("Scorer"))
    assert "confirmatory" in scorer and "80% needs 3" in scorer
    flagged = {p.finding for p in seed_plan.underpowered(seed_plan.plan(load_config(path)))}
    assert "Scorer" in flagged and "Attention" not in flagged


def test_an_exploratory_title_that_names_no_finding_is_one_error():
    config = Config()
    evaluate = config.evaluate.model_copy(update={"exploratory": {"Lenght": "typo"}})
    config = config.model_copy(update={"evaluate": evaluate})
    with pytest.raises(ConfigError, match=r"^evaluate\.exploratory: Lenght: no such finding"):
        seed_plan.plan(config)
    with pytest.raises(ConfigError, match="Lenght"):
        declared_design(config)


def test_a_why_is_required():
    with pytest.raises(ValueError, match="say why"):
        Config.model_validate({"evaluate": {"exploratory": {"Length": " "}}})


def test_declaring_a_finding_exploratory_is_part_of_the_locked_design():
    config = Config()
    evaluate = config.evaluate.model_copy(update={"exploratory": {}})
    confirmed = declared_design(config.model_copy(update={"evaluate": evaluate}))
    assert confirmed["findings"]["Length"]["exploratory"] is None
    assert declared_design(config)["findings"]["Length"]["exploratory"]


def test_a_finding_declared_exploratory_is_judged_outside_the_family():
    everything, _ = _study(good)
    declared, _ = _study(good, exploratory={"Reversal": "its gate is expected to fail"})
    reversal = declared["Reversal"]
    assert everything["Reversal"].confirmatory and not reversal.confirmatory
    assert reversal.exploratory == f"{DECLARED_EXPLORATORY}: its gate is expected to fail"

    def family(findings):
        return sum(1 for f in findings.values() if f.confirmatory for p in f.parts if p.primary)

    assert family(declared) == family(everything) - 1 == 3
    level = 1 - ALPHA / family(declared)
    assert declared["Attention"].main.estimate.alpha == pytest.approx(1 - level)


def test_the_train_stage_logs_the_plan_in_one_line_and_warns_in_one(caplog):
    caplog.set_level("INFO", logger="pipeline.study.plan")
    seed_plan.log_plan(load_config(REPO_ROOT / "params.yaml"))
    assert [r.levelname for r in caplog.records] == ["INFO"]
    assert "Scorer 85%" in caplog.records[0].getMessage()
    caplog.clear()
    config = Config()
    train = config.train.model_copy(update={"grid": {"scorer": ["none", "additive"], "seed": [1]}})
    seed_plan.log_plan(config.model_copy(update={"train": train}))
    levels = [r.levelname for r in caplog.records]
    assert levels == ["INFO", "WARNING"] and "Attention" in caplog.records[1].getMessage()
