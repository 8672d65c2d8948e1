"""Scorers of the user's own, from Python files of their project: no package edit.

A plugin file defines a :class:`pipeline.models.attention.Scorer` subclass and registers
it with :func:`register_scorer`; params name the file (``plugins: [scorers/cosine.py]``)
and put the scorer's name in the grid. The driver reads each file once
(:func:`read_plugins`); its source text, not its path, travels to Ray workers inside
the trial and decoding specs (:func:`load_plugins`), so workers that cannot see the
project run it too. The text's sha256 is part of its variants' cache keys: editing the
file retrains them (docs/scorers.md).
"""

from __future__ import annotations

import contextvars
import hashlib
import importlib.util
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.scorers import catalogue
from pipeline.scorers.catalogue import Flops, ScorerEntry

MODULE_PREFIX = "attention_study_plugins"
"""Plugin files are imported as ``attention_study_plugins.<file stem>``."""

SCORER_BASE = ("pipeline.models.attention", "Scorer")
"""The class a plugin scorer subclasses."""

REQUIRED = ("score_projected",)
"""What a scorer must define beyond the base class (``score`` may be overridden instead)."""


class PluginError(ValueError):
    """A plugin file that cannot be used; the message names the file."""


@dataclass(frozen=True)
class PluginSource:
    """A plugin file's path as params give it and its text."""

    path: str
    text: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]

    @property
    def module_name(self) -> str:
        stem = re.sub(r"\W", "_", Path(self.path).stem)
        return f"{MODULE_PREFIX}.{stem}_{self.digest[:8]}"


_LOADING: contextvars.ContextVar[PluginSource | None] = contextvars.ContextVar(
    "plugin", default=None
)
_LOADED: dict[str, PluginSource] = {}


def register_scorer(
    name: str, *, paper: str = "", formula: str = "", flops: Flops | None = None
) -> Callable[[type], type]:
    """Class decorator: register a :class:`~pipeline.models.attention.Scorer` subclass
    as scorer ``name``, with what the report shows (``paper``, ``formula``) and, for
    the benchmarks, its FLOPs (:data:`pipeline.scorers.catalogue.Flops`)."""

    def add(cls: type) -> type:
        source = _LOADING.get()
        where = (
            source.path
            if source
            else getattr(sys.modules.get(cls.__module__), "__file__", cls.__module__)
        )
        _check_class(cls, str(where))
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            raise PluginError(f"{where}: scorer name {name!r}: use lower-case letters, digits, _")
        digest = source.digest if source else _file_digest(where)
        entry = ScorerEntry(
            name,
            paper or f"plugin {where}",
            formula or cls.__doc__ or "",
            flops,
            cls,
            plugin=str(where),
            source_digest=digest,
        )
        try:
            catalogue.add(entry)
        except ValueError as err:
            raise PluginError(f"{where}: {err}") from None
        return cls

    return add


def _check_class(cls: type, where: str) -> None:
    # the base class found by name, so that loading config never imports the models
    bases = [b for b in getattr(cls, "__mro__", ()) if (b.__module__, b.__name__) == SCORER_BASE]
    Scorer = bases[0] if bases else None  # noqa: N806
    if Scorer is None:
        raise PluginError(
            f"{where}: {getattr(cls, '__name__', cls)} must subclass "
            "pipeline.models.attention.Scorer"
        )
    overrides_score = cls.score is not Scorer.score
    for method in REQUIRED:
        if getattr(cls, method) is getattr(Scorer, method) and not overrides_score:
            raise PluginError(
                f"{where}: {cls.__name__} must define {method}(self, query, keys) -> scores "
                "(B, T, S) (or score(self, query, keys)); see docs/scorers.md"
            )


def _file_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return ""


def read_plugins(paths: list[str], root: Path, key: str = "plugins") -> list[PluginSource]:
    """The files named in params (relative to ``root``, the params file's folder)."""
    sources = []
    for index, path in enumerate(paths):
        file = root / path
        if file.suffix != ".py":
            raise PluginError(f"{key}[{index}]: {path}: a plugin is a Python file (.py)")
        try:
            sources.append(PluginSource(path, file.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise PluginError(
                f"{key}[{index}]: {path}: file not found (relative to {root})"
            ) from None
        except (OSError, UnicodeDecodeError) as err:
            raise PluginError(f"{key}[{index}]: {path}: cannot read it: {err}") from None
    return sources


def load_plugins(sources: list[PluginSource]) -> list[str]:
    """Import each plugin (once per process and text) and return the scorer names they
    registered. Errors name the file; an exception inside it keeps its traceback."""
    names = []
    for source in sources:
        if source.module_name not in sys.modules:
            _import(source)
        _LOADED[source.path] = source
        added = [e.name for e in catalogue.entries() if e.plugin == source.path]
        if not added:
            raise PluginError(
                f"{source.path}: registers no scorer; decorate a Scorer subclass with "
                "@register_scorer('name') (see docs/scorers.md)"
            )
        names += added
    return names


def _import(source: PluginSource) -> None:
    if MODULE_PREFIX not in sys.modules:
        package = importlib.util.module_from_spec(
            importlib.util.spec_from_loader(MODULE_PREFIX, None)
        )
        package.__path__ = []
        sys.modules[MODULE_PREFIX] = package
    spec = importlib.util.spec_from_loader(source.module_name, loader=None, origin=source.path)
    module = importlib.util.module_from_spec(spec)
    module.__file__ = source.path
    sys.modules[source.module_name] = module
    token = _LOADING.set(source)
    try:
        code = compile(source.text, source.path, "exec")
        exec(code, module.__dict__)  # noqa: S102 (the user's own plugin file)
    except SyntaxError as err:
        del sys.modules[source.module_name]
        raise PluginError(f"{source.path}:{err.lineno}: syntax error: {err.msg}") from None
    except BaseException:  # a half-run plugin is not left behind as loaded
        del sys.modules[source.module_name]
        raise
    finally:
        _LOADING.reset(token)


def loaded() -> list[PluginSource]:
    """The plugins loaded in this process (what a driver ships to its workers)."""
    return list(_LOADED.values())
