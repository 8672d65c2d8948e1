"""Reading a record: a missing, unreadable or malformed file is one :class:`RecordError`
naming the file and what is wrong with it."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import pydantic

from pipeline.errors import StageError

T = TypeVar("T")


class RecordError(StageError):
    """A stage's input record is missing or malformed (the message names the file)."""


def read_record(path: Path, made_by: str) -> dict[str, Any]:
    """The JSON object in ``path``; a missing or unreadable file is a :class:`RecordError`
    naming the file and the command that makes it (``made_by``)."""
    if not path.is_file():
        raise RecordError(f"{path}: not found (run `{made_by}`)")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise RecordError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: not a JSON object")
    return data


@functools.cache
def _adapter(cls: type) -> pydantic.TypeAdapter:
    return pydantic.TypeAdapter(cls)


def validated(cls: type[T], data: Mapping[str, Any], where: str) -> T:
    """``data`` as a ``cls`` (a dataclass), its fields checked and converted by pydantic;
    a missing or mistyped field is a :class:`RecordError` naming ``where``."""
    try:
        return _adapter(cls).validate_python(dict(data))
    except (pydantic.ValidationError, TypeError) as err:
        problems = getattr(err, "errors", lambda: [])()
        first = problems[0] if problems else {"loc": (), "msg": str(err)}
        field = ".".join(str(part) for part in first["loc"]) or "record"
        raise RecordError(f"{where}: not a {cls.__name__} ({field}: {first['msg']})") from None
