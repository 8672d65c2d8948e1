"""Each trained variant as an MLflow model that translates.

:func:`save_pyfunc` writes an MLflow ``pyfunc`` model folder (``MLmodel``, the variant's
checkpoint, config and both subword models as artifacts); the tracking store uploads it as
the variant's logged model, so that

    mlflow.pyfunc.load_model("models:/<model id>").predict(["a sentence"])

returns translations, and ``mlflow models serve -m models:/<name>@dev-best --env-manager
local`` answers ``POST /invocations`` with ``{"inputs": ["a sentence"]}``. Loading
imports this project's ``pipeline`` package: serve from the project's environment
(``--env-manager local``).
"""

from __future__ import annotations

import importlib.metadata
import shutil
import tempfile
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import pandas as pd
from mlflow.models import ModelSignature
from mlflow.types import ColSpec, ParamSchema, ParamSpec, Schema

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
REQUIREMENTS = ("torch", "sentencepiece", "numpy", "pydantic", "pyyaml", "mlflow")


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


def _pins() -> list[str]:
    pins = []
    for name in REQUIREMENTS:
        try:
            version = importlib.metadata.version(name).split("+")[0]
        except importlib.metadata.PackageNotFoundError:
            continue
        pins.append(f"{name}=={version}")
    return pins


def save_pyfunc(files: Iterable[Path], path: Path) -> Path:
    """An MLflow pyfunc model at ``path`` from a variant's files (checkpoint.pt,
    config.json, src.model, tgt.model); checked by loading them first."""
    with tempfile.TemporaryDirectory(prefix="variant-") as tmp:
        folder = Path(tmp) / ARTIFACT
        folder.mkdir()
        code = Path(tmp) / "translation_model.py"
        code.write_text(ENTRY)
        for source in files:
            shutil.copyfile(source, folder / Path(source).name)
        example = Translator.load(folder).src.pieces([4])  # refuses what cannot translate
        with warnings.catch_warnings():  # the signature is given (MLflow asks for type hints)
            warnings.simplefilter("ignore", UserWarning)
            mlflow.pyfunc.save_model(
                str(path),
                python_model=str(code),
                artifacts={ARTIFACT: str(folder)},
                signature=SIGNATURE,
                input_example=["".join(example).replace("\u2581", " ").strip() or "a"],
                pip_requirements=_pins(),
            )
    return path
