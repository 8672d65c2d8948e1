"""Every figure the README quotes is checked against the file it comes from.

The results block (``tools.readme_block``) and the two-commands table
(``tools.first_run``) are generated and checked whole. Every other number in the
README's prose must be matched by one of the FIGURES below, each of which compares what
the README says with the committed outputs (``metrics/``, ``reports/``,
``benchmarks/results/``) or the configuration it describes; a number that no check covers
fails ``test_every_number_in_the_readme_is_checked``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pandas as pd
import pytest

from pipeline.config import load_config
from pipeline.config.grid import expand_grid
from tests.support import REPO_ROOT
from tools import first_run, readme_block

README = REPO_ROOT / "README.md"
GENERATED = [(readme_block.START, readme_block.END), (first_run.START, first_run.END)]


def prose(text: str) -> str:
    """The README without its generated blocks, fenced code, inline code, link targets and
    HTML comments, with whitespace collapsed (sentences wrap across lines)."""
    for start, end in GENERATED:
        head, rest = text.split(start, 1)
        text = head + rest.split(end, 1)[1]
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"!\[[^\]]*\]", " ", text)
    return re.sub(r"\s+", " ", text)


def number(text: str) -> float:
    return float(text.replace(",", ""))


@cache
def summary() -> pd.DataFrame:
    return pd.read_csv(REPO_ROOT / "reports" / "summary.csv")


@cache
def params() -> object:
    return load_config(REPO_ROOT / "params.yaml")


@cache
def provenance() -> dict:
    text = (REPO_ROOT / "reports" / "README.md").read_text(encoding="utf-8")
    block = text.rsplit("```json", 1)[1].split("```", 1)[0]
    return json.loads(block)["machine"]


@cache
def preset(name: str):
    config = load_config(REPO_ROOT / "presets" / name)
    return config, expand_grid(config)


CUDA_LOG_FILES = ("tests/unit/test_cuda.py", "tests/unit/test_models.py")


@cache
def collected(*files: str) -> int:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"},
    ).stdout
    return sum(1 for line in out.splitlines() if "::" in line)


def current_default(m: re.Match) -> list[tuple]:
    variants = expand_grid(params())
    confirmatory = {}
    for v in variants:
        key = (v.model.scorer, v.model.reverse_source, v.model.hidden_size)
        confirmatory[key] = confirmatory.get(key, 0) + 1
    words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
    several = [c for c in confirmatory.values() if c > 1]
    return [
        (number(m[1]), len(variants)),
        (number(m[2]), params().fetch.split.max_train_words),
        (m[3], words.get(min(several))),
        (m[4], words.get(max(several))),
    ]


@cache
def final_slopes() -> pd.DataFrame:
    """Each variant's last step and final dev-BLEU slope over the convergence window, from
    the committed ``metrics/learning_curves.csv`` (tools.convergence)."""
    from tools.convergence import slopes

    curves = pd.read_csv(REPO_ROOT / "metrics" / "learning_curves.csv")
    return slopes(curves, params().train.converged_window)


def converged(m: re.Match) -> list[tuple]:
    """The largest seed median of a configuration's final dev-BLEU slope, and the largest
    single variant's (tools.convergence)."""
    from tools.convergence import by_configuration

    per_variant = final_slopes()
    table = by_configuration(per_variant)
    return [
        (number(m[1]), params().train.converged_window),
        (float(m[2]), round(float(table.median_slope.max()), 2)),
        (float(m[3]), round(float(per_variant.slope.max()), 2)),
    ]


def total_updates(m: re.Match) -> list[tuple]:
    return [
        (number(m[1]), int(final_slopes().last_step.sum())),
        (number(m[2]), params().train.batch_tokens),
    ]


def inside_sentences(m: re.Match) -> list[tuple]:
    lengths = pd.read_csv(REPO_ROOT / "metrics" / "bleu_by_length.csv")
    first = lengths[lengths.configuration == lengths.configuration.iloc[0]]
    return [
        (number(m[1]), first[first.training_range == "inside"].sentences.sum()),
        (number(m[2]), params().fetch.split.max_train_words),
    ]


def plateaued(m: re.Match) -> list[tuple]:
    table = summary()
    return [
        (bool(table.plateaued.all()), True),
        (number(m[1]), table.steps.min()),
        (number(m[2]), table.steps.max()),
        (number(m[3]), params().train.max_steps),
    ]


def cuda_tests(m: re.Match) -> list[tuple]:
    checks = [(number(m[1]), collected("tests/unit/test_cuda.py"))]
    for gpu, folder in ((m[2], "gpu_study"), (m[3], "gpu_hidden_size")):
        results = REPO_ROOT / "benchmarks" / "results" / folder
        log = (results / "test_cuda.log").read_text()
        # the log is of `pytest tests/unit/test_cuda.py tests/unit/test_models.py` on the GPU
        outcome = re.search(r"^(\d+) passed in [\d.]+s$", log, flags=re.M)
        checks += [
            (gpu in (results / "gpu.txt").read_text(), True),
            (outcome and int(outcome[1]), collected(*CUDA_LOG_FILES)),
        ]
    return checks


def quick(m: re.Match) -> list[tuple]:
    config, variants = preset("quick.yaml")
    return [
        (number(m[1]), len(variants)),
        (number(m[2]), config.train.max_steps),
        (number(m[3]), config.fetch.split.test_size),
    ]


def gpu_preset(m: re.Match) -> list[tuple]:
    _, variants = preset("gpu-cluster.yaml")
    sizes = sorted({v.model.hidden_size for v in variants})
    seeds = {v.train.seed for v in variants}
    return [
        (number(m[1]), len(variants)),
        (m[2], "/".join(str(s) for s in sizes)),
        (m[3], {3: "three", 5: "five"}.get(len(seeds))),
    ]


def pyproject(pattern: str) -> tuple[str, ...]:
    found = re.search(pattern, (REPO_ROOT / "pyproject.toml").read_text())
    assert found, f"pyproject.toml: no {pattern}"
    return found.groups()


def python_versions(m: re.Match) -> list[tuple]:
    low, high = pyproject(r'requires-python = ">=3\.(\d+),<3\.(\d+)"')
    return [
        (m[1], ".".join(provenance()["python"].split(".")[:2])),
        (m[2], f"3.{low}"),
        (m[3], f"3.{int(high) - 1}"),
    ]


def torch_versions(m: re.Match) -> list[tuple]:
    low, high = pyproject(r'"torch>=2\.(\d+),<2\.(\d+)"')
    return [
        (m[1], f"2.{low}"),
        (m[2], f"2.{int(high) - 1}"),
        (m[3], provenance()["torch"].split("+")[0]),
    ]


def pieces(m: re.Match) -> list[tuple]:
    return [(number(m[1]), params().tokenize.vocab_size)]


def license_year(m: re.Match) -> list[tuple]:
    return [(m[1] in (REPO_ROOT / "LICENSE").read_text(), True)]


def citation_year(m: re.Match) -> list[tuple]:
    return [(m[1] in (REPO_ROOT / "CITATION.cff").read_text(), True)]


FIGURES: dict[str, tuple[str, Callable[[re.Match], list[tuple]]]] = {
    "the default study's size": (
        r"trains (\d+) variants on sentences of up to (\d+) words, (\w+) or (\w+) seeds behind "
        r"each configuration a confirmatory finding compares",
        current_default,
    ),
    "test sentences inside the training lengths": (
        r"the ([\d,]+) test sentences of at most (\d+) words",
        inside_sentences,
    ),
    "steps to the plateau and the cap": (
        r"Every variant plateaued, at ([\d,]+)-([\d,]+) updates \(the cap is ([\d,]+)\)",
        plateaued,
    ),
    "the final dev-BLEU slopes": (
        r"slope over its last ([\d,]+) updates was at most \+([\d.]+) BLEU per 1,000 updates, "
        r"every\s+single variant's at most \+([\d.]+)",
        converged,
    ),
    "the study's updates": (
        r"The study trained ([\d,]+) updates of ([\d,]+) target tokens in\s+all",
        total_updates,
    ),
    "CUDA tests": (
        r"\((\d+) tests\) runs only where .*? it passed on an (\w+) and an (\w+)",
        cuda_tests,
    ),
    "the quick preset": (
        r"small grid \((\d+) variants, ([\d,]+) updates each, ([\d,]+) test sentences\)",
        quick,
    ),
    "the GPU preset": (
        r"(\d+) variants at hidden sizes ([\d/]+) with (\w+) seeds",
        gpu_preset,
    ),
    "Python": (r"Python (3\.\d+)\*\* \(the project supports (3\.\d+)-(3\.\d+)\)", python_versions),
    "torch": (
        r"admits torch (2\.\d+)-(2\.\d+); the committed study ran on torch ([\d.]+)\.",
        torch_versions,
    ),
    "subword pieces": (r"([\d,]+) pieces per language", pieces),
    "license year": (r"copyright (\d{4}) the attention-study authors", license_year),
    "cited paper": (r"Bahdanau, Cho and Bengio \((\d{4})\)", citation_year),
}


@pytest.fixture(scope="module")
def text() -> str:
    return prose(README.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", list(FIGURES))
def test_readme_figure_matches_its_source(text, name):
    pattern, check = FIGURES[name]
    match = re.search(pattern, text)
    assert match, f"README.md no longer says: {pattern}"
    for said, source in check(match):
        assert said == source, f"{name}: README says {said!r}, the source says {source!r}"


def test_every_number_in_the_readme_is_checked(text):
    covered = [m.span() for pattern, _ in FIGURES.values() for m in re.finditer(pattern, text)]
    unchecked = [
        m.group()
        for m in re.finditer(r"\d[\d,.]*", text)
        if not any(a <= m.start() < b for a, b in covered)
    ]
    assert not unchecked, f"numbers in README.md that no check covers: {unchecked}"


def test_two_commands_table_is_generated_from_the_first_run_results():
    assert first_run.update_readme(README, check=True) == 0


def test_a_changed_figure_fails_its_check(tmp_path, text):
    pattern, check = FIGURES["steps to the plateau and the cap"]
    edited = re.sub(r"at ([\d,]+)-", "at 1,234-", text, count=1)
    match = re.search(pattern, edited)
    assert match and any(said != source for said, source in check(match))


def test_the_prose_filter_keeps_numbers_outside_code(tmp_path):
    sample = "Trains 18 variants. `make 5` ```\nrun 7\n``` [x](docs/a1.md) done 9"
    assert re.findall(r"\d+", prose(sample + "".join(s + e for s, e in GENERATED))) == ["18", "9"]


def test_the_readme_block_markers_exist():
    readme = README.read_text(encoding="utf-8")
    assert all(start in readme and end in readme for start, end in GENERATED)
    assert Path(first_run.OUT, "first_run.json").is_file()


def test_a_resumed_study_is_quoted_as_its_segments_summed(tmp_path):
    for name in ("first_run.json", "first_run_tests.json"):
        (tmp_path / name).write_text((Path(first_run.OUT) / name).read_text())
    one_shot = first_run.readme_block(tmp_path)
    segments = [
        {"stages_s": {"setup": 60.0, "fetch": 2.0, "tokenize": 4.0, "train": 3600.0}},
        {"stages_s": {"train": 7200.0, "evaluate": 600.0}},
        {"stages_s": {"evaluate": 1200.0, "report": 30.0}},
    ]
    record = {
        "environment": {"cpu": "AMD EPYC", "cpus": 2, "isa": "AVX2 only"},
        "variants": 35,
        "segments": segments,
    }
    (tmp_path / first_run.RESUMED).write_text(json.dumps(record))
    row = next(r for r in first_run.readme_block(tmp_path).splitlines() if "`make study` |" in r)
    assert "3.5 h on a 2-core AMD EPYC (AVX2 only): the 35-variant grid, run as 3 " in row
    assert "train 3.0 h, evaluate 30.0 min, report 0.5 min" in row
    assert "fetch + tokenize 0.1 min" in row and "setup 1.0 min" in row
    test_row = next(r for r in one_shot.splitlines() if r.startswith("| `make test`"))
    assert test_row in first_run.readme_block(tmp_path)  # the tests' row is unchanged
    del segments[2]["stages_s"]["report"]
    (tmp_path / first_run.RESUMED).write_text(json.dumps(record))
    with pytest.raises(SystemExit, match="report"):
        first_run.readme_block(tmp_path)
