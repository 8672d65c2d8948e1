"""A study on one machine opens no port beyond the loopback.

Ray (2.60) binds its GCS, raylet and worker ports on every interface, whatever address it
is told to advertise. A stage that starts a private local Ray and tracks to a local store
therefore re-runs itself, before anything starts, in a network namespace of its own
(``unshare --user --map-root-user --net``: no privilege needed where the kernel allows
unprivileged user namespaces), whose only interface is its own loopback: every port the
stage's Ray opens is reachable from that process tree only, and none appears among the
machine's listeners (``ss -ltn``). The process keeps its PID (``unshare`` execs the
stage), so DVC, signals and exit codes behave as before; files it writes belong to the
user as before (the user is root only inside the namespace).

It applies when the stage needs no network: no ``ray.address`` (a private Ray), a local
MLflow store (``sqlite:``, ``file:`` or a path, not a server URI) and a local Tune
storage path. Otherwise, or where ``unshare`` is missing or the kernel refuses
(containers often do), the stage runs as before and says so in one line; docs/cluster.md
lists the ports a Ray opens and how to restrict them. ``STUDY_NETWORK=host`` turns the
namespace off.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import socket
import struct
import subprocess
import sys

from pipeline.config.infra import Infra

logger = logging.getLogger(__name__)

INSIDE = "STUDY_NETNS"
"""Set to ``1`` in the re-run stage: it is inside its namespace (bring the loopback up)."""
OPT_OUT = "STUDY_NETWORK"
"""``host``: never use a namespace."""
UNSHARE = ("--user", "--map-root-user", "--net")
PROBE_TIMEOUT_S = 10
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def needs_network(infra: Infra) -> str | None:
    """Why the stage needs the machine's network (a cluster, a tracking server, remote
    storage), or ``None`` when everything it talks to is local."""
    if infra.ray.address:
        return "it joins a Ray cluster (ray.address)"
    uri = infra.tracking.uri or ""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", uri) and not uri.startswith(("sqlite:", "file:")):
        return f"its MLflow store is a server ({uri.split('://', 1)[0]}://)"
    storage = infra.ray.storage_path or ""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", storage) and not storage.startswith("file:"):
        return "its Tune storage is remote (ray.storage_path)"
    return None


def _unshare() -> str | None:
    """The ``unshare`` command, where it can make a user and network namespace here."""
    if not sys.platform.startswith("linux"):
        return None
    command = shutil.which("unshare")
    if command is None:
        return None
    try:
        probe = subprocess.run(
            [command, *UNSHARE, "true"], capture_output=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return command if probe.returncode == 0 else None


def isolate(infra: Infra) -> None:
    """Re-run this stage inside its own network namespace (never returns) when it may
    (see the module docstring); inside one, bring its loopback up and return."""
    if os.environ.get(INSIDE) == "1":
        loopback_up()
        return
    if os.environ.get(OPT_OUT, "").lower() == "host":
        return
    reason = needs_network(infra)
    if reason is not None:
        logger.debug("no private network namespace: %s", reason)
        return
    command = _unshare()
    if command is None:
        logger.info(
            "Ray listens on every interface: this system cannot give the stage a private "
            'network namespace (unshare --user --net refused); docs/cluster.md, "Ports"'
        )
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(
        command,
        [command, *UNSHARE, sys.executable, *sys.orig_argv[1:]],
        {**os.environ, INSIDE: "1"},
    )


def loopback_up() -> None:
    """Set the namespace's loopback interface up (a new namespace starts with it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14s", b"lo", 0, bytes(14))
        flags = struct.unpack("16sH14s", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        if not flags & _IFF_UP:
            fcntl.ioctl(
                sock, _SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | _IFF_UP, bytes(14))
            )
