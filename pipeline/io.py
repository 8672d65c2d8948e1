"""Atomic file output: a stage never leaves a half-written file or folder behind; and a
write that fails for lack of space is one line naming the path, what is free there and
what it needed (:class:`DiskFullError`)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipeline.errors import StageError

_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_FULL_TEXTS = ("no space left on device", "disk quota exceeded", "database or disk is full")
"""How a full disk reads in an error's text where no errno survives (``shutil.Error``'s
list of failed copies, Ray's wrapped trial errors, SQLite)."""


class DiskFullError(StageError):
    """A write failed for lack of space (``ENOSPC``, a quota): ``path``, the bytes
    ``free`` on its filesystem and the bytes ``needed`` (``at_least``: a lower bound:
    what had been written when it failed), with ``advice``, in one line."""

    def __init__(
        self,
        path: str | Path,
        free: int | None,
        needed: int | None = None,
        advice: str = "",
        at_least: bool = False,
    ):
        self.path, self.free, self.needed = Path(path), free, needed
        self.advice, self.at_least = advice, at_least
        super().__init__(self._line())

    def __reduce__(self):  # crosses Ray intact: a trial's error reaches the driver
        return (type(self), (self.path, self.free, self.needed, self.advice, self.at_least))

    def _line(self) -> str:
        free = "free space unknown" if self.free is None else f"{human_size(self.free)} free"
        needed = ""
        if self.needed:
            needed = f", {'more than ' if self.at_least else ''}{human_size(self.needed)} needed"
        advice = f"; {self.advice}" if self.advice else ""
        return f"no space left on device for {self.path} ({free} there{needed}){advice}"


def human_size(count: int) -> str:
    """``count`` bytes in words: ``512 B``, ``94.2 KB``, ``16.8 MB`` (powers of 1000)."""
    value = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(value) < 1000:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def free_bytes(path: str | Path) -> int | None:
    """Bytes free to this user on the filesystem that holds ``path`` (its nearest existing
    folder); ``None`` when that cannot be read."""
    where = Path(path).absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        return shutil.disk_usage(where).free
    except OSError:
        return None


def tree_bytes(path: str | Path) -> int:
    """The size of a file, or of every file under a folder (0 for what is not there)."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def is_disk_full(err: BaseException | None) -> bool:
    """Whether ``err``, or an error it was raised from, is a write failing for lack of
    space: by its errno, else by its text."""
    for _ in range(20):
        if err is None:
            return False
        if isinstance(err, DiskFullError) or getattr(err, "errno", None) in _FULL_ERRNOS:
            return True
        if any(text in str(err).lower() for text in _FULL_TEXTS):
            return True
        err = err.__cause__ or err.__context__
    return False


def disk_full(
    err: BaseException, path: str | Path, needed: int | None = None
) -> DiskFullError | None:
    """``err`` as a :class:`DiskFullError` naming the file it names (a copy's or link's
    destination first), else ``path``; ``None`` when it is not a full disk."""
    if isinstance(err, DiskFullError):
        return err
    if not is_disk_full(err):
        return None
    named = (getattr(err, "filename2", None), getattr(err, "filename", None))
    target = next((Path(n) for n in named if isinstance(n, str | Path)), Path(path))
    return DiskFullError(target, free_bytes(target), needed)


@contextmanager
def space_for(path: str | Path, needed: int | None = None) -> Iterator[None]:
    """Writes under ``path`` inside the block: one that fails for lack of space raises
    :class:`DiskFullError` naming the file the error names, else ``path`` (``needed``:
    the bytes the block writes)."""
    try:
        yield
    except Exception as err:
        full = disk_full(err, path, needed)
        if full is None or full is err:
            raise
        raise full from err


def ensure_space(path: str | Path, needed: int) -> None:
    """Raise :class:`DiskFullError` before writing ``needed`` bytes under ``path`` when its
    filesystem has less free: a large copy fails whole, leaving the disk as it was."""
    free = free_bytes(path)
    if free is not None and free < needed:
        raise DiskFullError(path, free, needed)


def link_or_copy(pairs: Iterable[tuple[Path, Path]], folder: Path) -> None:
    """Each ``(source, dest)``: a hard link where the filesystem allows (no space used),
    else a copy, once ``folder``'s filesystem has room for all the copies."""
    copies = []
    for source, dest in pairs:
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, dest)
        except OSError:
            copies.append((source, dest))
    if copies:
        needed = sum(source.stat().st_size for source, _ in copies)
        with space_for(folder, needed):
            ensure_space(folder, needed)
            for source, dest in copies:
                shutil.copy2(source, dest)


def _inside(err: BaseException, folder: Path) -> bool:
    """Whether a full-disk ``err`` is about ``folder`` (or names no path)."""
    paths = [getattr(err, "path", None), getattr(err, "filename2", None)]
    paths.append(getattr(err, "filename", None))
    named = [Path(p) for p in paths if isinstance(p, str | Path)]
    return not named or any(p.is_relative_to(folder) for p in named)


@contextmanager
def atomic_path(path: str | Path, needed: int | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``.

    On an exception the temporary file is removed and ``path`` is left untouched; a full
    disk is a :class:`DiskFullError` naming ``path`` (``needed``: the bytes written).
    """
    path = Path(path)
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        yield tmp
        tmp.chmod(0o644)
        os.replace(tmp, path)
    except Exception as err:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        if not is_disk_full(err) or not _inside(err, path.parent):
            raise
        raise DiskFullError(path, free_bytes(path), needed) from err
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path, len(data)) as tmp:
        tmp.write_bytes(data)


def write_json(path: str | Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


@contextmanager
def atomic_dir(path: str | Path, needed: int | None = None) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success it replaces ``path``.

    A failed stage leaves the previous ``path`` (or nothing) in place, never a mix. A full
    disk is a :class:`DiskFullError` naming ``path``, with ``needed`` (else, as a lower
    bound, what had been written when it failed).
    """
    path = Path(path)
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        yield tmp
        tmp.chmod(0o755)
        if path.exists():
            backup = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, backup / "old")
            os.replace(tmp, path)
            shutil.rmtree(backup, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except Exception as err:
        written = tree_bytes(tmp) if tmp is not None and tmp.exists() else 0
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if not is_disk_full(err) or not _inside(err, path.parent):
            raise
        exact = isinstance(err, DiskFullError) and not err.at_least
        known = needed or (err.needed if exact else None)
        size, partial = (known, False) if known else (written, True)
        raise DiskFullError(path, free_bytes(path), size, at_least=partial) from err
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
