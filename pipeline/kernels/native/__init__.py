"""Compiled CPU kernels, built on first use with the machine's C++ compiler, and the
fallback when they cannot be.

One kernel today: the additive energy ``v . tanh(q_t + k_s)`` and its backward, fused
(``additive_energy.cpp``). :mod:`pipeline.kernels.additive_energy` uses it for float32 CPU
tensors when :func:`additive_energy_kernel` returns it, and its own torch blocks
otherwise; ``benchmarks/energy_kernel.py`` of commit 968721a measured both (results in
``benchmarks/results/energy_kernel/``).

The build is torch's JIT extension build (``torch.utils.cpp_extension.load``: ninja and
the C++ compiler torch finds, ``c++`` by default). It is compiled for the CPU that builds
it (``-march=native``), so its folder is named by a hash of the source, the flags, the
torch version and the CPU's model and flags: a cluster whose nodes differ (or share a
home folder) builds one per kind of CPU, never loads another CPU's build; the hash also
names torch's folder, whose headers the build uses (one build per virtualenv), and the
source is compiled from a copy in the folder, so checkouts at other paths (clones, DVC
experiments' temporary copies, Ray's copy of the package) share the build instead of
rebuilding it in turn. The folder is
under ``$TORCH_EXTENSIONS_DIR`` if set, else ``~/.cache/attention-study/kernels``. A
build takes about 22 s once per machine (21.6 s measured).

Concurrent processes (Ray trials) take an OS file lock in that folder (``filelock``:
``flock``, released by the kernel when its holder dies, even by SIGKILL or a power
loss), so one builds and the others wait, with a message, for at most
:data:`BUILD_LOCK_TIMEOUT_S`, then load the same build. Torch's own lock (a file whose
existence is the lock) outlives a killed holder and would make every later build wait
forever; holding the OS lock, no other process of ours can be building, so such a file
is stale: it is removed, with a one-line warning.

``ATTENTION_STUDY_NATIVE=off`` skips the kernels (the torch path everywhere). A failed
build (no compiler, no ninja) logs one warning and falls back, so nothing depends on it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import platform
import threading
from pathlib import Path
from types import ModuleType

import torch
from filelock import FileLock, Timeout

from pipeline.io import write_text
from pipeline.runtime.precision import cpuinfo_fields

logger = logging.getLogger(__name__)

ENV_SWITCH = "ATTENTION_STUDY_NATIVE"
"""Set to ``off`` (or ``0``, ``false``) to use the torch implementations only."""

BUILD_LOCK_TIMEOUT_S = 900.0
"""Longest wait for another process's build (a build takes under a minute); then the
torch implementation is used, with a warning."""
OS_LOCK = "build.flock"
"""The OS file lock in a kernel's build folder."""
TORCH_LOCK = "lock"
"""torch's ``FileBaton`` file in the build folder (stale if present while we hold ours)."""

SOURCE = Path(__file__).with_name("additive_energy.cpp")
CFLAGS = ["-O3", "-march=native", "-fopenmp-simd"]

_lock = threading.Lock()
_loaded: dict[str, ModuleType | None] = {}


def enabled() -> bool:
    """False when ``ATTENTION_STUDY_NATIVE`` turns the kernels off."""
    return os.environ.get(ENV_SWITCH, "on").strip().lower() not in {"off", "0", "false", "no"}


def additive_energy_kernel() -> ModuleType | None:
    """The compiled additive-energy kernel (``forward``, ``backward``), built on first
    call; None when turned off or when it cannot be built (logged once)."""
    if not enabled():
        return None
    with _lock:
        if "additive_energy" not in _loaded:
            _loaded["additive_energy"] = _build("additive_energy", SOURCE)
        return _loaded["additive_energy"]


def describe() -> str:
    """Which energy implementation runs here: ``native`` or ``torch`` (for logs/params)."""
    return "native" if additive_energy_kernel() is not None else "torch"


def _build(name: str, source: Path) -> ModuleType | None:
    try:
        from torch.utils import cpp_extension

        _put_ninja_on_path()
        folder = _build_folder(name, source)
        folder.mkdir(parents=True, exist_ok=True)
        with _build_lock(folder):
            # compiled from a copy in the folder: a checkout elsewhere (another clone, a
            # DVC experiment's temporary copy, Ray's copy of the package on a worker) has
            # the same source at another path, which torch would take for a new build;
            # the folder's name hashes the source, so a copy there is this source
            copy = folder / source.name
            if not copy.is_file():
                write_text(copy, source.read_text())
            module = cpp_extension.load(
                name=f"attention_study_{name}_{folder.name[-12:]}",
                sources=[str(copy)],
                extra_cflags=CFLAGS,
                build_directory=str(folder),
                verbose=False,
            )
    except Exception as error:  # a missing compiler or ninja: the torch path instead
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        logger.warning(
            "compiled %s kernel unavailable (%s); using the torch implementation "
            "(%s=off skips the build)",
            name,
            first[:300],
            ENV_SWITCH,
        )
        return None
    logger.info("compiled %s kernel loaded from %s", name, folder)
    return module


class BuildLockTimeout(RuntimeError):
    """Another process held a kernel's build lock past :data:`BUILD_LOCK_TIMEOUT_S`."""


@contextlib.contextmanager
def _build_lock(folder: Path, timeout: float | None = None):
    """Hold ``folder``'s OS lock (waiting for another process's build, with a message and
    a bound); remove torch's lock file if a dead process left it."""
    timeout = BUILD_LOCK_TIMEOUT_S if timeout is None else timeout
    lock = FileLock(folder / OS_LOCK)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        logger.info(
            "waiting for another process's kernel build in %s (at most %.0f s)", folder, timeout
        )
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise BuildLockTimeout(
                f"{folder / OS_LOCK}: another process held the build lock for more than "
                f"{timeout:.0f} s"
            ) from None
    try:
        stale = folder / TORCH_LOCK
        if stale.exists():
            logger.warning(
                "%s: a build lock left by a process that is gone (killed during a build); removed",
                stale,
            )
            stale.unlink(missing_ok=True)
        yield
    finally:
        lock.release()


def _build_folder(name: str, source: Path) -> Path:
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "attention-study" / "kernels"
    identity = hashlib.sha256()
    for part in (
        source.read_bytes(),
        " ".join(CFLAGS).encode(),
        torch.__version__.encode(),
        str(Path(torch.__file__).parent).encode(),  # its headers: one build per venv
        _cpu_identity().encode(),
    ):
        identity.update(part)
        identity.update(b"\0")
    return base / f"{name}-{identity.hexdigest()[:16]}"


def _cpu_identity() -> str:
    """The CPU's model name and feature flags (what ``-march=native`` compiles for)."""
    keys = {"model name", "flags", "Features", "CPU part"}
    fields = {k: v for k, v in cpuinfo_fields().items() if k in keys}
    return f"{platform.machine()}|{platform.processor()}|{sorted(fields.items())}"


def _put_ninja_on_path() -> None:
    """torch's build runs ``ninja`` from PATH; the pip package's binary may not be on it
    (a venv's python run without activating the venv, a Ray worker)."""
    try:
        import ninja
    except ImportError:
        return
    directory = getattr(ninja, "BIN_DIR", None)
    path = os.environ.get("PATH", "")
    if directory and directory not in path.split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([directory, path]) if path else directory
