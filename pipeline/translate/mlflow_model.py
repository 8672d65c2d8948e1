"""Each trained variant as an MLflow model that translates, loadable without the project.

:func:`save_pyfunc` writes an MLflow ``pyfunc`` model folder: ``MLmodel``, the variant's
checkpoint, config and both subword models as artifacts, the project's modules that
loading imports (``code/pipeline/``: this module's import closure, :func:`code_modules`,
with the native kernel's source) and ``requirements.txt`` pinning the installed version
of each third-party package those modules import (:func:`requirements`). The tracking
store uploads it as the variant's logged model, so that

    mlflow.pyfunc.load_model("models:/<model id>").predict(["a sentence"])

returns translations, and ``mlflow models serve -m models:/<name>@dev-best`` answers
``POST /invocations`` with ``{"inputs": ["a sentence"]}``, from any environment that
has MLflow and the model's requirements: ``--env-manager virtualenv`` (or ``uv``)
builds one from ``requirements.txt``; ``--env-manager local`` uses the current one.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import pandas as pd
from mlflow.models import ModelSignature
from mlflow.types import ColSpec, ParamSchema, ParamSpec, Schema

from pipeline.scorers import catalogue
from pipeline.translate import DEFAULT_BEAM_SIZE, Translator

ARTIFACT = "variant"  # the artifact folder: checkpoint.pt, config.json, src.model, tgt.model
SIGNATURE = ModelSignature(
    inputs=Schema([ColSpec("string")]),
    outputs=Schema([ColSpec("string")]),
    params=ParamSchema(
        [
            ParamSpec("beam_size", "long", DEFAULT_BEAM_SIZE),
            ParamSpec("length_penalty", "double", 1.0),
        ]
    ),
)
ENTRY = """\
# The model's code (MLflow "models from code"): loading runs this file; nothing pickled.
import mlflow.models

from pipeline.translate.mlflow_model import TranslationModel

mlflow.models.set_model(TranslationModel())
"""
PACKAGE = "pipeline"
ROOT = Path(__file__).resolve().parents[2]
"""The folder that holds the ``pipeline`` package whose modules a model carries."""
PACKAGE_DATA = ("*.cpp",)
"""Non-Python files a carried package needs (pyproject's package-data: the native
kernel's source, compiled on first use)."""


class TranslationModel(mlflow.pyfunc.PythonModel):
    """Sentences in (a list of strings, or a one-column frame), translations out."""

    def load_context(self, context) -> None:
        self.translator = Translator.load(context.artifacts[ARTIFACT])

    def predict(
        self, context, model_input: pd.DataFrame, params: dict[str, Any] | None = None
    ) -> list[str]:
        # MLflow hands the signature's one string column as a frame (a type hint it
        # infers no schema from: the given signature, with its params, holds)
        params = params or {}
        found = self.translator.translate(
            _sentences(model_input),
            beam_size=int(params.get("beam_size", DEFAULT_BEAM_SIZE)),
            length_penalty=float(params.get("length_penalty", 1.0)),
        )
        return [t.translation for t in found]


def _sentences(model_input) -> list[str]:
    if isinstance(model_input, str):
        return [model_input]
    if hasattr(model_input, "iloc"):  # a frame (first column) or a series
        column = model_input.iloc[:, 0] if getattr(model_input, "ndim", 1) == 2 else model_input
        return [str(v) for v in column.tolist()]
    return [str(v) for v in model_input]


def _module_file(name: str) -> Path | None:
    path = ROOT.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _imported(name: str, path: Path) -> set[str]:
    """Every module an ``import`` anywhere in ``path`` (module ``name``) may name, lazy
    ones too (``from a import b`` names ``a`` and, if it is a module, ``a.b``)."""
    package = name.split(".")[: -1 if path.name != "__init__.py" else None]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            anchor = package[: len(package) - node.level + 1] if node.level else []
            base = ".".join([*anchor, node.module] if node.module else anchor)
            found |= {base, *(f"{base}.{alias.name}" for alias in node.names)}
    return found


def code_modules(entry: str = __name__) -> dict[str, Path]:
    """The project's modules that loading ``entry`` may import: its import closure (each
    package's ``__init__`` included) and the built-in scorers' modules, which the
    catalogue imports by name. Module name -> file."""
    targets = (catalogue.get(name).target for name in catalogue.BUILTIN)
    todo = [entry, *(t.partition(":")[0] for t in targets if isinstance(t, str))]
    found: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if name in found or path is None:
            continue
        found[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:end]) for end in range(1, len(parts))]
        todo += [n for n in _imported(name, path) if n.split(".")[0] == PACKAGE]
    return found


@functools.cache
def _providers() -> dict[str, list[str]]:
    """Top-level module -> installed distributions (read once: most of a second)."""
    return importlib.metadata.packages_distributions()


def requirements(modules: dict[str, Path]) -> list[str]:
    """``name==version`` of the installed distribution of each third-party package that
    ``modules`` import (the local version label dropped, as MLflow does, so that it
    installs from PyPI); a package that is not installed is an optional import."""
    tops = {
        imported.split(".")[0]
        for name, path in modules.items()
        for imported in _imported(name, path)
    } - {PACKAGE, *sys.stdlib_module_names}
    providers = _providers()
    pins = set()
    for top in tops:
        names = providers.get(top, [])
        if names:  # mlflow: mlflow, mlflow-skinny, mlflow-tracing: the one named so
            name = top if top in names else sorted(names)[0]
            pins.add(f"{name}=={importlib.metadata.version(name).split('+')[0]}")
    return sorted(pins, key=str.lower)


def _copy_code(modules: dict[str, Path], into: Path) -> Path:
    """The files of ``modules`` and their packages' data under ``into/pipeline``."""
    for path in modules.values():
        relative = path.relative_to(ROOT)
        (into / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, into / relative)
        if path.name == "__init__.py":
            for pattern in PACKAGE_DATA:
                for data in path.parent.glob(pattern):
                    shutil.copyfile(data, into / relative.parent / data.name)
    return into / PACKAGE


def save_pyfunc(files: Iterable[Path], path: Path) -> Path:
    """An MLflow pyfunc model at ``path`` from a variant's files (checkpoint.pt,
    config.json, src.model, tgt.model), with the code and requirements to load it where
    the project is not installed; checked by loading them first."""
    with tempfile.TemporaryDirectory(prefix="variant-") as tmp:
        folder = Path(tmp) / ARTIFACT
        folder.mkdir()
        code = Path(tmp) / "translation_model.py"
        code.write_text(ENTRY)
        for source in files:
            shutil.copyfile(source, folder / Path(source).name)
        example = Translator.load(folder).src.pieces([4])  # refuses what cannot translate
        modules = code_modules()
        with warnings.catch_warnings():  # the signature is given (MLflow asks for type hints)
            warnings.simplefilter("ignore", UserWarning)
            mlflow.pyfunc.save_model(
                str(path),
                python_model=str(code),
                artifacts={ARTIFACT: str(folder)},
                signature=SIGNATURE,
                input_example=["".join(example).replace("\u2581", " ").strip() or "a"],
                pip_requirements=requirements(modules),
                code_paths=[str(_copy_code(modules, Path(tmp) / "code"))],
            )
    return path
