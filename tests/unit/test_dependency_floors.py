"""pyproject's dependency floors admit no version that lacks an API the code uses.

``APIS`` lists, per package, an API the code calls and the first release that has it,
with the release note that says so. Each API must still appear in the code (so the table
cannot outlive the code that needed it), and each package's floor in pyproject.toml must
be at least the newest version its APIs need.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import cache

import pytest

from pipeline.tracking.provenance import PACKAGES
from tests.support import REPO_ROOT

PYPROJECT = REPO_ROOT / "pyproject.toml"
CODE = ("pipeline", "stages")


@dataclass(frozen=True)
class Api:
    package: str
    text: str
    """How the code spells it (found as is in the source text)."""
    since: str
    """The first release that has it."""
    source: str
    """The release note (or pull request) that says so."""
    where: tuple[str, ...] = CODE
    """The folders whose code uses it."""


_RAY_241 = (
    "Ray 2.41.0 release notes, Ray Tune: the Tune entry points in ray.tune (report, "
    "get_checkpoint, Checkpoint, RunConfig, FailureConfig, CheckpointConfig), "
    "ray-project/ray#49317"
)
_MLFLOW_3 = "MLflow 3.0.0 release notes: LoggedModel, models as first-class entities"

APIS = (
    Api("ray", "tune.report(", "2.41", _RAY_241),
    Api("ray", "tune.get_checkpoint(", "2.41", _RAY_241),
    Api("ray", "tune.Checkpoint", "2.41", _RAY_241),
    Api("ray", "tune.RunConfig(", "2.41", _RAY_241),
    Api("ray", "tune.FailureConfig(", "2.41", _RAY_241),
    Api("ray", "tune.CheckpointConfig(", "2.41", _RAY_241),
    Api("mlflow", "create_logged_model(", "3.0", _MLFLOW_3),
    Api("mlflow", "search_logged_models(", "3.0", _MLFLOW_3),
    Api("mlflow", "finalize_logged_model(", "3.0", _MLFLOW_3),
    Api("mlflow", "log_model_artifact", "3.0", _MLFLOW_3),  # or log_model_artifacts
    Api("mlflow", "log_outputs(", "3.0", _MLFLOW_3),
    Api("mlflow", "LoggedModelOutput", "3.0", _MLFLOW_3),
    Api("mlflow", "LoggedModelStatus", "3.0", _MLFLOW_3),
    Api("mlflow", "dataset_name=", "3.0", _MLFLOW_3 + " (metrics linked to a model/dataset)"),
    Api("mlflow", "model_id=model_id", "3.0", _MLFLOW_3 + " (a model version of a logged model)"),
    Api("mlflow", "set_registered_model_alias(", "2.3", "MLflow 2.3.0 release notes: aliases"),
    Api(
        "torch",
        "torch.get_autocast_dtype(",
        "2.4",
        "PyTorch 2.4.0 release notes: device-agnostic autocast API "
        "(torch.get_autocast_dtype, torch.is_autocast_enabled(device_type)), "
        "pytorch/pytorch#124359",
    ),
    Api(
        "pydantic",
        "use_attribute_docstrings=True",
        "2.7",
        "Pydantic 2.7.0 release notes: attribute docstrings as field descriptions "
        "(ConfigDict.use_attribute_docstrings)",
    ),
    Api(
        "sacrebleu",
        "is_json=True",
        "2.0",
        "sacreBLEU 2.0.0 release notes: the metrics API (sacrebleu.metrics) with bootstrap "
        "confidence intervals and JSON output (Score.format(is_json=True))",
    ),
    Api(
        "scipy",
        "isotonic_regression(",
        "1.12",
        "SciPy 1.12.0 release notes: new scipy.optimize.isotonic_regression",
        where=("benchmarks",),
    ),
)


def _version(text: str) -> tuple[int, ...]:
    parts = tuple(int(p) for p in re.findall(r"\d+", text.split("+")[0]))
    return parts + (0,) * (4 - len(parts))


def _name(requirement: str) -> str:
    name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert name, f"pyproject.toml: cannot read a name in {requirement!r}"
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


def _regex_dependencies(text: str) -> list[str]:
    """``[project] dependencies`` without a TOML parser (Python 3.10 has none)."""
    block = re.search(r"^dependencies = \[\n(.*?)^\]", text, flags=re.M | re.S)
    assert block, "pyproject.toml: no dependencies = [...] list"
    return re.findall(r'^\s*"([^"]+)"', block.group(1), flags=re.M)


@cache
def dependencies() -> tuple[str, ...]:
    text = PYPROJECT.read_text(encoding="utf-8")
    if sys.version_info >= (3, 11):
        import tomllib

        return tuple(tomllib.loads(text)["project"]["dependencies"])
    return tuple(_regex_dependencies(text))


def floors(requirements: tuple[str, ...]) -> dict[str, str]:
    """Package -> the lowest version its requirement admits (``>=`` or ``==``)."""
    found = {}
    for requirement in requirements:
        low = re.search(r"(?:>=|==)\s*([0-9][0-9.]*)", requirement)
        assert low, f"pyproject.toml: {requirement!r} has no floor (>= or ==)"
        found[_name(requirement)] = low.group(1)
    return found


def floor_problems(declared: dict[str, str]) -> list[str]:
    """One line per API that a declared floor does not have."""
    problems = []
    for api in APIS:
        floor = declared.get(api.package)
        if floor is None:
            problems.append(f"pyproject.toml: {api.package} is not a dependency ({api.text})")
        elif _version(floor) < _version(api.since):
            problems.append(
                f"pyproject.toml: {api.package}>={floor} is too low: the code uses "
                f"{api.text.rstrip('(')}, which needs {api.package}>={api.since} ({api.source})"
            )
    return problems


@cache
def code_text(folder: str) -> str:
    return "\n".join(
        p.read_text(encoding="utf-8") for p in sorted((REPO_ROOT / folder).rglob("*.py"))
    )


def test_each_floor_has_every_api_the_code_uses():
    problems = floor_problems(floors(dependencies()))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("api", APIS, ids=lambda a: f"{a.package}:{a.text}")
def test_each_listed_api_is_used_by_the_code(api):
    assert any(api.text in code_text(folder) for folder in api.where), (
        f"{api.text!r} ({api.package}) is no longer in {', '.join(api.where)}/: drop it from "
        "APIS in tests/unit/test_dependency_floors.py, and lower the floor if nothing else "
        "needs it"
    )


def test_a_floor_below_an_api_fails_naming_the_package_the_api_and_the_version():
    declared = floors(dependencies()) | {"ray": "2.40"}
    problems = floor_problems(declared)
    assert problems and all(p.startswith("pyproject.toml: ray>=2.40 is too low") for p in problems)
    assert "tune.report, which needs ray>=2.41 (Ray 2.41.0 release notes" in problems[0]
    assert floor_problems(declared | {"ray": "2.41.0"}) == []
    without_scipy = {k: v for k, v in declared.items() if k != "scipy"} | {"ray": "2.41"}
    assert [p for p in floor_problems(without_scipy) if "scipy is not a dependency" in p]


def test_the_regex_reading_of_pyproject_matches_toml():
    """Python 3.10 reads the list with a regex; where tomllib exists, both must agree."""
    text = PYPROJECT.read_text(encoding="utf-8")
    assert _regex_dependencies(text) == list(dependencies())


def test_provenance_records_every_dependency():
    """A result records the version of each dependency (pipeline/tracking/provenance.py),
    so a constraints file can reinstall them (constraints/study.txt)."""
    names = {_name(r) for r in dependencies()}
    assert names == set(PACKAGES), (
        f"pipeline/tracking/provenance.py PACKAGES: missing {sorted(names - set(PACKAGES))}, "
        f"not a dependency {sorted(set(PACKAGES) - names)}"
    )


def test_version_comparison():
    assert _version("2.40") < _version("2.41") < _version("2.41.0.1") < _version("3")
    assert _version("2.13.0+cpu") == _version("2.13")
