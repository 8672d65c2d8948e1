"""Scorers of the user's own, from Python files of their project: no package edit.

A plugin file defines a :class:`pipeline.models.attention.Scorer` subclass and registers
it with :func:`register_scorer`; params name the file (``plugins: [scorers/cosine.py]``)
and put the scorer's name in the grid. Reading params reads each file
(:func:`read_plugins`) and runs it aside to learn the names it registers
(:func:`scan_plugins`), which is all their validation needs: reading params changes no
process-wide state. A process that trains, decodes or reports with the scorers loads them
explicitly (:func:`load_plugins`: the stage's ``load_config``, a Ray trial or task from
the source text its spec carries, so workers that cannot see the project run them too).
The text's sha256 is part of its variants' cache keys: editing the file retrains them
(docs/scorers.md).
"""

from __future__ import annotations

import contextvars
import hashlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
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
_SCANNED: contextvars.ContextVar[list[ScorerEntry] | None] = contextvars.ContextVar(
    "scanned", default=None
)
"""While :func:`scan_plugins` runs a file: where its registrations go (not the catalogue)."""
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
        scanned = _SCANNED.get()
        try:
            if scanned is None:
                catalogue.add(entry)
            else:
                catalogue.check_name(entry, scanned)
                scanned[:] = [e for e in scanned if e.name != name] + [entry]
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


ANYWHERE_ENV = "STUDY_PLUGINS_ANYWHERE"
"""Set to 1 to allow plugin files outside the project folder (the params file's)."""


def read_plugins(paths: list[str], root: Path, key: str = "plugins") -> list[PluginSource]:
    """The files named in params (relative to ``root``, the params file's folder). A
    plugin runs as code on every stage that reads the params, like a ``dvc.yaml``
    command, and a value given with ``dvc exp run -S`` can name one: so a file outside
    ``root`` is refused unless :data:`ANYWHERE_ENV` is 1."""
    sources = []
    anywhere = os.environ.get(ANYWHERE_ENV) == "1"
    for index, path in enumerate(paths):
        file = root / path
        if file.suffix != ".py":
            raise PluginError(f"{key}[{index}]: {path}: a plugin is a Python file (.py)")
        if not anywhere and not file.resolve().is_relative_to(root.resolve()):
            raise PluginError(
                f"{key}[{index}]: {path}: outside the project folder {root}; a plugin runs "
                f"as code on every dvc repro, so it must lie inside (set {ANYWHERE_ENV}=1 "
                "to allow files elsewhere)"
            )
        try:
            sources.append(PluginSource(path, file.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise PluginError(
                f"{key}[{index}]: {path}: file not found (relative to {root})"
            ) from None
        except (OSError, UnicodeDecodeError) as err:
            raise PluginError(f"{key}[{index}]: {path}: cannot read it: {err}") from None
    return sources


def scan_plugins(sources: list[PluginSource]) -> tuple[ScorerEntry, ...]:
    """The scorers the plugins register, in order, learned by running each file aside (as
    a module of its own that is dropped afterwards): nothing is added to the catalogue, to
    :func:`loaded` or to ``sys.modules``. The checks are :func:`load_plugins`'s, so a bad
    file fails here naming it; a name taken by a built-in or by another of ``sources``
    too. Config validation uses the names (:func:`pipeline.config.params.read_params`)."""
    entries: list[ScorerEntry] = []
    for source in sources:
        found: list[ScorerEntry] = []
        token = _SCANNED.set(found)
        try:
            _run(source, f"{MODULE_PREFIX}_scan_{source.module_name.rpartition('.')[2]}")
        finally:
            _SCANNED.reset(token)
        _check_registered(source, found)
        for entry in found:
            try:
                catalogue.check_name(entry, entries)
            except ValueError as err:
                raise PluginError(f"{source.path}: {err}") from None
            entries.append(replace(entry, order=len(catalogue.BUILTIN) + len(entries)))
    return tuple(entries)


def load_plugins(sources: list[PluginSource]) -> list[str]:
    """Import each plugin into this process's catalogue (once per process and text) and
    return the scorer names they registered: the explicit step of a process that trains,
    decodes or reports with them. Errors name the file; an exception inside it keeps its
    traceback."""
    names = []
    for source in sources:
        if source.module_name not in sys.modules:
            _import(source)
        _LOADED[source.path] = source
        added = [e for e in catalogue.entries() if e.plugin == source.path]
        _check_registered(source, added)
        names += [e.name for e in added]
    return names


def unload_plugins() -> None:
    """Forget every plugin this process loaded: their scorers leave the catalogue, their
    modules ``sys.modules``, and :func:`loaded` is empty again (a process that runs
    several projects in turn, such as the test suite)."""
    catalogue.remove_plugins()
    _LOADED.clear()
    for name in [m for m in sys.modules if m.startswith(MODULE_PREFIX + ".")]:
        del sys.modules[name]


def _check_registered(source: PluginSource, entries: list[ScorerEntry]) -> None:
    if not entries:
        raise PluginError(
            f"{source.path}: registers no scorer; decorate a Scorer subclass with "
            "@register_scorer('name') (see docs/scorers.md)"
        )


def _import(source: PluginSource) -> None:
    if MODULE_PREFIX not in sys.modules:
        package = importlib.util.module_from_spec(
            importlib.util.spec_from_loader(MODULE_PREFIX, None)
        )
        package.__path__ = []
        sys.modules[MODULE_PREFIX] = package
    _run(source, source.module_name, keep=True)


def _run(source: PluginSource, module_name: str, keep: bool = False) -> None:
    """Run the plugin's text as module ``module_name`` (in ``sys.modules`` while it runs,
    as an import has it, and after only with ``keep``)."""
    spec = importlib.util.spec_from_loader(module_name, loader=None, origin=source.path)
    module = importlib.util.module_from_spec(spec)
    module.__file__ = source.path
    sys.modules[module_name] = module
    token = _LOADING.set(source)
    kept = False
    try:
        code = compile(source.text, source.path, "exec")
        exec(code, module.__dict__)  # noqa: S102 (the user's own plugin file)
        kept = keep
    except SyntaxError as err:
        raise PluginError(f"{source.path}:{err.lineno}: syntax error: {err.msg}") from None
    finally:  # a half-run plugin is not left behind as loaded
        _LOADING.reset(token)
        if not kept:
            sys.modules.pop(module_name, None)


def loaded() -> list[PluginSource]:
    """The plugins loaded in this process (what a driver ships to its workers)."""
    return list(_LOADED.values())
