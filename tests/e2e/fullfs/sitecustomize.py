"""A small filesystem mounted at one folder, emulated inside every Python process of a
stage: put this folder first on ``PYTHONPATH`` and set ``FULL_DISK_FOLDER`` (the folder)
and ``FULL_DISK_BYTES`` (its size). Python imports ``sitecustomize`` at start-up, so the
driver and the Ray workers it starts on this machine (they inherit its environment) all
see the same filesystem.

Why not a real one: a tmpfs or a loop mount needs root (``mount``), and ``ulimit -f``
gives ``EFBIG`` per file, not ``ENOSPC`` per filesystem. What is emulated, as a tmpfs
of that size would behave:

- **Space.** Used space is what the files under the folder hold (4 KiB blocks, each
  hard-linked file once), measured at each write, so deleting a file frees its space and
  every process shares one budget. A write past the size writes what fits and raises
  ``OSError(ENOSPC)``: Python's ``open`` (so ``pathlib``, ``shutil``, ``json``,
  ``logging``, numpy, pandas), ``os.write``, ``os.sendfile``/``os.copy_file_range``
  (``shutil``'s fast copy), and ``pyarrow.fs.copy_files`` (Ray Tune's checkpoint
  copies: refused whole, with pyarrow's own message).
- **Another device.** ``os.link``, ``os.rename`` and ``os.replace`` between the folder
  and elsewhere raise ``EXDEV``, as across mount points (``shutil.move`` then copies).
- **statvfs.** ``os.statvfs`` (so ``shutil.disk_usage``) of a path inside reports the
  folder's size and free space.

Not seen: writes by C or C++ code other than pyarrow's copies (SQLite, torch's
checkpoint writer), which the study makes elsewhere (the MLflow store, the trials'
scratch folders). Another ``sitecustomize`` later on ``sys.path`` still runs.
"""

from __future__ import annotations

import builtins
import errno
import importlib.abc
import importlib.util
import io
import os
import sys

BLOCK = 4096


def _real(path) -> str:
    return os.path.realpath(os.fspath(path))


class _Disk:
    def __init__(self, folder: str, size: int):
        self.root = _real(folder)
        self.size = size

    def inside(self, path) -> bool:
        if isinstance(path, int) or path is None:
            return False
        try:
            real = _real(path)
        except (TypeError, ValueError):
            return False
        return real == self.root or real.startswith(self.root + os.sep)

    def used(self) -> int:
        seen, total, todo = set(), 0, [self.root]
        while todo:
            try:
                entries = list(os.scandir(todo.pop()))
            except OSError:
                continue
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        stat = entry.stat(follow_symlinks=False)
                        if stat.st_ino not in seen:
                            seen.add(stat.st_ino)
                            total += _blocks(stat.st_size)
                except OSError:
                    continue
        return total

    def free(self) -> int:
        return max(0, self.size - self.used())

    def room(self, size_now: int, wanted: int) -> int:
        """How many of ``wanted`` more bytes fit in a file of ``size_now`` bytes."""
        spare = self.size - self.used() + _blocks(size_now) - size_now
        return max(0, min(wanted, spare))


def _blocks(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _full(path=None) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), *([path] if path else []))


def _fd_path(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


class _LimitedFile:
    """A file opened for writing under the folder: each write is checked, then flushed
    (so that the next measure sees it)."""

    def __init__(self, handle, path):
        self._handle, self._path = handle, path

    def write(self, data):
        handle = self._handle
        size = len(data.encode(handle.encoding or "utf-8")) if isinstance(data, str) else len(data)
        handle.flush()
        room = DISK.room(os.fstat(handle.fileno()).st_size, size)
        if room < size:
            if not isinstance(data, str) and room:
                handle.write(bytes(memoryview(data)[:room]))
                handle.flush()
            raise _full()
        written = handle.write(data)
        handle.flush()
        return written

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()

    def __iter__(self):
        return iter(self._handle)

    def __getattr__(self, name):
        return getattr(self._handle, name)


_open = io.open


def _limited_open(file, mode="r", *args, **kwargs):
    handle = _open(file, mode, *args, **kwargs)
    if any(c in mode for c in "wax+") and DISK.inside(file):
        return _LimitedFile(handle, file)
    return handle


def _checked_fd(real, fd_arg: int, count_arg: int | None = None):
    """Wrap an ``os`` call that writes ``count`` bytes to the fd at ``fd_arg``."""

    def call(*args):
        path = _fd_path(args[fd_arg])
        if path is None or not DISK.inside(path):
            return real(*args)
        size = os.fstat(args[fd_arg]).st_size
        wanted = len(args[1]) if count_arg is None else args[count_arg]
        room = DISK.room(size, wanted)
        if room == 0 and wanted:
            raise _full()
        if room < wanted:
            args = list(args)
            if count_arg is None:
                args[1] = bytes(memoryview(args[1])[:room])
            else:
                args[count_arg] = room
        return real(*args)

    return call


def _same_device(real):
    def call(src, dst, *args, **kwargs):
        if DISK.inside(src) != DISK.inside(dst):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), os.fspath(src), None, dst)
        return real(src, dst, *args, **kwargs)

    return call


def _statvfs(real):
    def call(path):
        result = real(path)
        if not DISK.inside(path):
            return result
        free = DISK.free() // BLOCK
        return os.statvfs_result(
            (BLOCK, BLOCK, DISK.size // BLOCK, free, free, *tuple(result)[5:10])
        )

    return call


def _patch_pyarrow(module) -> None:
    real = module.copy_files

    def copy_files(source, destination, source_filesystem=None, destination_filesystem=None, **kw):
        local = (
            destination_filesystem is None
            or getattr(destination_filesystem, "type_name", "") == "local"
        )
        if local and DISK.inside(destination):
            size = 0
            if source_filesystem is None or source_filesystem.type_name == "local":
                for folder, _, names in os.walk(source):
                    size += sum(os.path.getsize(os.path.join(folder, n)) for n in names)
            if DISK.free() < size:
                raise OSError(
                    errno.ENOSPC,
                    "Error writing bytes to file. Detail: [errno 28] No space left on device",
                )
        return real(source, destination, source_filesystem, destination_filesystem, **kw)

    module.copy_files = copy_files


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches ``pyarrow.fs`` once it is imported (it is not imported here: start-up
    stays fast)."""

    def find_spec(self, name, path, target=None):
        if name != "pyarrow.fs":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch_pyarrow(module)

        spec.loader.exec_module = exec_module
        return spec


def _install() -> None:
    builtins.open = io.open = _limited_open
    os.write = _checked_fd(os.write, 0)
    os.sendfile = _checked_fd(os.sendfile, 0, 3)
    if hasattr(os, "copy_file_range"):
        os.copy_file_range = _checked_fd(os.copy_file_range, 1, 2)
    for name in ("link", "rename", "replace"):
        setattr(os, name, _same_device(getattr(os, name)))
    os.statvfs = _statvfs(os.statvfs)
    sys.meta_path.insert(0, _PatchOnImport())


def _chain() -> None:
    """Run the ``sitecustomize`` this one shadows, if there is one."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.abspath(entry or ".") != here and os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_shadowed_sitecustomize", candidate)
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


DISK = None
if os.environ.get("FULL_DISK_FOLDER"):
    DISK = _Disk(os.environ["FULL_DISK_FOLDER"], int(os.environ["FULL_DISK_BYTES"]))
    os.makedirs(DISK.root, exist_ok=True)
    _install()
_chain()
