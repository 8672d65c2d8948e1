"""Tracking that never stalls training: records go to a journal on disk, and a background
thread sends them to MLflow.

- **Writers never wait.** The sweep's Tune callbacks append a record (one JSON line,
  flushed) to this process's journal and return; a sender thread applies the records in
  order through :class:`~pipeline.tracking.store.Tracker`. Files to log (checkpoints,
  curves, ``sweep.json``) are hard-linked into the journal when recorded, so they are
  sent as they were even if ``models/`` changes later.
- **Outages.** When the store is unreachable the sender says so once, keeps every record
  and retries with a bounded backoff (:data:`RETRY_MAX_S`), and says so again when the
  store is back. Training goes on throughout.
- **Exactly once.** The number of records already sent is kept beside the journal, and
  each operation is harmless to repeat after a crash between sending and counting:
  metrics carry their timestamp (MLflow drops an exact duplicate), runs and logged
  models carry a tag naming their record and are looked up before being created, tags
  and artifacts overwrite themselves.
- **Left over.** At the end of a stage the driver waits up to
  ``tracking.outage_wait_seconds`` (infra.yaml) for the journal to drain; what is left
  stays under ``<cache_dir>/tracking/<writer>/`` and the next train or evaluate stage
  sends it (or ``python -m pipeline.tracking.outbox``).
- **Ownership.** A live writer holds ``<writer>/lock`` (an OS lock that dies with its
  process). A RUNNING run tagged with a live writer is never reopened by another process:
  two queued DVC experiments training the same variant each get their own runs.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import textwrap
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from pipeline.io import DiskFullError, is_disk_full, link_or_copy, space_for, write_json, write_text
from pipeline.tracking.store import HOST, WRITER_TAG, Tracker, writer_alive

logger = logging.getLogger(__name__)

RECORD_TAG = "tracking.record"
"""Tag of a run or logged model: the journal record that made it (found before a resend)."""
RETRY_MAX_S = 30.0
"""Longest pause between two attempts to reach an unreachable store."""
QUICK_CLIENT = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
"""MLflow's own HTTP retries (about 2 minutes by default) shortened where the sender
runs: it retries a record itself, and an outage is reported within seconds."""


class Journal:
    """One writer's records: ``records.jsonl``, ``sent`` (how many are in MLflow),
    ``runs.json`` (record refs -> MLflow run ids), ``files/`` (snapshots), ``lock``."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.name = folder.name
        self._lock = FileLock(folder / "lock")
        self._append = threading.Lock()
        self.runs: dict[str, str] = _read_json(folder / "runs.json", {})
        self.sent = int(_read_json(folder / "sent", 0))
        self._count = len(self.records())

    @staticmethod
    def create(root: Path) -> Journal:
        folder = root / f"{os.getpid()}-{uuid.uuid4().hex[:8]}@{HOST}"
        (folder / "files").mkdir(parents=True)
        journal = Journal(folder)
        journal._lock.acquire(timeout=0)  # held for the process's life
        return journal

    def adopt(self) -> bool:
        """Take an orphaned journal (its writer is gone): hold its lock. False if alive."""
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            return False
        return True

    def release(self) -> None:
        self._lock.release(force=True)

    # ------------------------------------------------------------------ records
    def append(self, record: dict[str, Any]) -> int:
        """Add ``record``; a full disk raises :class:`DiskFullError` and leaves the file as
        it was (a line cut short would hide every later record)."""
        with self._append:
            record = {"seq": self._count, **record}
            line = (json.dumps(record, default=str) + "\n").encode("utf-8")
            path = self.folder / "records.jsonl"
            with space_for(path, len(line)):
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    start = os.lseek(fd, 0, os.SEEK_END)
                    try:
                        written = 0
                        while written < len(line):
                            written += os.write(fd, line[written:])
                        os.fsync(fd)
                    except OSError:
                        os.ftruncate(fd, start)
                        raise
                finally:
                    os.close(fd)
            self._count += 1
            return record["seq"]

    def records(self) -> list[dict[str, Any]]:
        """Every complete record (a line cut short by a crash is not one)."""
        try:
            lines = (self.folder / "records.jsonl").read_text(encoding="utf-8").split("\n")
        except FileNotFoundError:
            return []
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except ValueError:
                break
        return records

    def pending(self) -> int:
        return self._count - self.sent

    def mark_sent(self, count: int) -> None:
        self.sent = count
        _keep(write_text, self.folder / "sent", f"{count}\n")

    def set_run(self, ref: str, run_id: str) -> None:
        self.runs[ref] = run_id
        _keep(write_json, self.folder / "runs.json", self.runs)

    def set_aside(self, record: dict[str, Any]) -> None:
        """Keep a record the store refused in ``refused.jsonl`` (best effort)."""
        try:
            with (self.folder / "refused.jsonl").open("a") as handle:
                handle.write(json.dumps(record, default=str) + "\n")
        except OSError as err:
            logger.debug("tracking journal: refused record not kept (%s)", err)

    def snapshot(self, seq_key: str, paths: Iterable[Path]) -> list[str]:
        """Hard-link (or copy) ``paths`` into ``files/<seq_key>/``; their new paths. A full
        disk raises :class:`DiskFullError` and leaves no part of the snapshot."""
        target = self.folder / "files" / seq_key
        kept, pairs = [], []
        for path in map(Path, paths):
            dest = target / path.name
            if path.is_dir():
                files = sorted(f for f in path.rglob("*") if f.is_file())
                pairs += [(f, dest / f.relative_to(path)) for f in files]
            elif path.is_file():
                pairs.append((path, dest))
            else:
                continue
            kept.append(str(dest))
        try:
            with space_for(target):
                target.mkdir(parents=True, exist_ok=True)
                link_or_copy(pairs, target)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        return kept


def _keep(write, path: Path, data) -> None:
    """Write a journal's own bookkeeping (what was sent, run ids): in memory it stays
    right; on a full disk the file lags, and a crash then resends records, which is
    harmless (records are idempotent)."""
    try:
        write(path, data)
    except (OSError, DiskFullError) as err:
        logger.debug("tracking journal: %s not updated (%s)", path, err)


def _read_json(path: Path, default):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


class Outbox:
    """This process's tracking: the writer API (runs named by a ``ref`` of the caller's
    choosing), one journal, a sender thread; orphaned journals are sent first."""

    def __init__(self, tracker: Tracker, cache_dir: Path):
        for key, value in QUICK_CLIENT.items():
            os.environ.setdefault(key, value)
        self.tracker = tracker
        self.root = cache_dir / "tracking"
        self.journal = Journal.create(self.root)
        self.orphans = [j for j in _journals(self.root, skip=self.journal.name) if j.adopt()]
        if self.orphans:
            waiting = sum(j.pending() for j in self.orphans)
            logger.info("MLflow: %d tracking records of earlier runs to send", waiting)
        self._wake = threading.Event()
        self._closing = False
        self._offline_since: float | None = None
        self._thread = threading.Thread(target=self._loop, name="mlflow-outbox", daemon=True)
        self._thread.start()

    # --------------------------------------------------------------- writer API
    def _put(self, record: dict[str, Any]) -> None:
        self.journal.append(record)
        self._wake.set()

    def start_run(
        self,
        ref: str,
        name: str,
        key: Mapping[str, str],
        *,
        reuse=(),
        parent: str | None = None,
        params=None,
        tags=None,
    ) -> None:
        """Find (``reuse``: :meth:`Tracker.find_or_start`) or start the run ``ref``."""
        self._put(
            {
                "op": "run",
                "ref": ref,
                "name": name,
                "key": dict(key),
                "reuse": list(reuse),
                "parent": parent,
                "params": dict(params or {}),
                "tags": dict(tags or {}),
            }
        )

    def log_metrics(self, ref: str, metrics: Mapping[str, Any], step: int = 0) -> None:
        """Metrics at ``step``, stamped now (the sender keeps the stamp; the tracker
        drops what is not a finite number)."""
        self._put(
            {
                "op": "metrics",
                "ref": ref,
                "metrics": dict(metrics),
                "step": int(step),
                "ts": int(time.time() * 1000),
            }
        )

    def set_tags(self, ref: str, tags: Mapping[str, Any]) -> None:
        self._put({"op": "tags", "ref": ref, "tags": {k: str(v) for k, v in tags.items()}})

    def finish(self, ref: str, status: str = "FINISHED") -> None:
        self._put({"op": "finish", "ref": ref, "status": status})

    def close_stale(self, tags: Mapping[str, str], status: str, reason: str) -> None:
        """End as ``status`` the runs carrying ``tags`` that a writer now gone left
        RUNNING (:meth:`Tracker.close_stale`), once the records before this one are sent
        (those of an orphaned journal included: a run they end is not stale)."""
        record = {"op": "close", "ref": "", "tags": dict(tags), "status": status}
        self._put({**record, "reason": reason})

    def log_artifacts(self, ref: str, paths: Iterable[Path], subdir: str | None = None) -> None:
        kept = self.journal.snapshot(uuid.uuid4().hex[:12], paths)
        self._put({"op": "artifacts", "ref": ref, "paths": kept, "subdir": subdir})

    def log_dataset(self, ref: str, name: str, path: Path, digest: str, context: str) -> None:
        self._put(
            {
                "op": "dataset",
                "ref": ref,
                "name": name,
                "path": str(path),
                "digest": digest,
                "context": context,
            }
        )

    def log_model(
        self,
        ref: str,
        name: str,
        model_dir: Path,
        *,
        step: int,
        params: Mapping[str, Any],
        tags: Mapping[str, str],
    ) -> None:
        """Log ``model_dir`` (an MLflow model folder, copied into the journal now) as a
        logged model of ``ref``'s run."""
        (kept,) = self.journal.snapshot(uuid.uuid4().hex[:12], [model_dir])
        self._put(
            {
                "op": "model",
                "ref": ref,
                "name": name,
                "model_dir": kept,
                "step": int(step),
                "params": {k: str(v) for k, v in params.items()},
                "tags": dict(tags),
            }
        )

    def run_ids(self) -> dict[str, str]:
        """The MLflow run id of each ref sent so far."""
        return dict(self.journal.runs)

    # ------------------------------------------------------------------ sending
    def _loop(self) -> None:
        while True:
            for journal in [*self.orphans, self.journal]:
                if not self._drain(journal):
                    break  # unreachable: _drain waited; start again from the oldest
            else:
                self._finish_orphans()
                if self._closing and self.journal.pending() == 0:
                    return
                self._wake.wait(1.0)
                self._wake.clear()

    def _drain(self, journal: Journal) -> bool:
        if journal.pending() == 0:  # the idle loop reads nothing
            return True
        records = journal.records()
        while journal.sent < len(records):
            record = records[journal.sent]
            try:
                self._apply(journal, record)
            except Exception as err:
                if not self._transient(err):
                    logger.warning(
                        "MLflow refused a tracking record (%s of run %s): %s: %s; skipped",
                        record["op"],
                        record["ref"],
                        type(err).__name__,
                        str(err).splitlines()[0] if str(err) else "",
                    )
                    journal.set_aside(record)
                    journal.mark_sent(journal.sent + 1)
                    continue
                self._went_offline(err)
                return False
            journal.mark_sent(journal.sent + 1)
            self._came_back()
        return True

    def _finish_orphans(self) -> None:
        for journal in list(self.orphans):
            if journal.pending() == 0:
                self.orphans.remove(journal)
                shutil.rmtree(journal.folder, ignore_errors=True)

    def _reachable(self) -> bool:
        uri = self.tracker.uri
        if not uri.startswith(("http://", "https://")):
            return True
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5) as response:  # noqa: S310
                return response.status == 200
        except OSError:
            return False

    def _transient(self, err: Exception) -> bool:
        """An outage (retry the record later: a store that cannot be reached, or is
        locked, or whose disk is full), not a record the store refuses."""
        if "database is locked" in str(err) or is_disk_full(err):
            return True
        return not self._reachable()

    def _went_offline(self, err: Exception) -> None:
        now = time.monotonic()
        if self._offline_since is None:
            self._offline_since = now
            self._backoff = 1.0
            logger.warning(
                "MLflow at %s is unreachable (%s); training goes on and tracking records "
                "wait in %s until it is back",
                self.tracker.uri,
                _short(err),
                self.root,
            )
        self._wake.wait(self._backoff)
        self._wake.clear()
        self._backoff = min(RETRY_MAX_S, self._backoff * 2)

    def _came_back(self) -> None:
        if self._offline_since is not None:
            waiting = sum(j.pending() for j in [*self.orphans, self.journal])
            logger.warning(
                "MLflow at %s is back after %.0f s; sending %d waiting tracking records",
                self.tracker.uri,
                time.monotonic() - self._offline_since,
                waiting,
            )
            self._offline_since = None

    def _apply(self, journal: Journal, record: dict[str, Any]) -> None:
        tracker, op = self.tracker, record["op"]
        if op == "run":
            self._apply_run(journal, record)
            return
        if op == "close":
            tracker.close_stale(record["tags"], record["status"], record["reason"], self._writes)
            return
        run_id = journal.runs.get(record["ref"])
        if run_id is None:
            raise ValueError(f"no run {record['ref']!r} was started before this record")
        if op == "metrics":
            tracker.log_metrics(run_id, record["metrics"], record["step"], record["ts"])
        elif op == "tags":
            tracker.set_tags(run_id, record["tags"])
        elif op == "finish":
            tracker.finish(run_id, record["status"])
        elif op == "artifacts":
            tracker.log_artifacts(run_id, map(Path, record["paths"]), record["subdir"])
        elif op == "dataset":
            tracker.log_dataset(
                run_id, record["name"], Path(record["path"]), record["digest"], record["context"]
            )
        elif op == "model":
            made_by = {RECORD_TAG: f"{journal.name}/{record['seq']}"}
            if tracker.log_models and tracker.find_logged_model(made_by) is None:
                if "model_dir" not in record:
                    raise ValueError("a model record of an older version (no MLflow model)")
                tracker.log_model(
                    run_id,
                    record["name"],
                    Path(record["model_dir"]),
                    step=record["step"],
                    params=record["params"],
                    tags={**record["tags"], **made_by},
                )
        else:
            raise ValueError(f"unknown tracking record {op!r}")

    def _apply_run(self, journal: Journal, record: dict[str, Any]) -> None:
        ref = record["ref"]
        if ref in journal.runs:
            return
        made_by = {RECORD_TAG: f"{journal.name}/{ref}"}
        found = self.tracker.find_run(made_by)
        if found is not None:
            journal.set_run(ref, found.info.run_id)
            return
        parent = journal.runs.get(record["parent"]) if record["parent"] else None
        run_id = self.tracker.find_or_start(
            record["name"],
            record["key"],
            reuse=record["reuse"],
            parent_id=parent,
            params=record["params"],
            tags={**record["tags"], **made_by, WRITER_TAG: self.journal.name},
            owned=self._owned_by_another,
        )
        journal.set_run(ref, run_id)

    def _writes(self, writer: str | None) -> bool:
        """Whether ``writer`` still writes its runs: this process, or a live other one
        (an orphaned journal this process adopted is not)."""
        orphans = {j.name for j in self.orphans}
        return writer == self.journal.name or (
            writer not in orphans and writer_alive(self.root, writer)
        )

    def _owned_by_another(self, writer: str | None) -> bool:
        mine = {self.journal.name, *(j.name for j in self.orphans)}  # adopted: their locks
        return writer not in mine and writer_alive(self.root, writer)

    # -------------------------------------------------------------------- close
    def close(self, wait_s: float) -> int:
        """Send what is left (waiting up to ``wait_s`` while the store is unreachable);
        returns the number of records kept for a later run."""
        self._closing = True
        self._wake.set()
        deadline = time.monotonic() + wait_s
        told = False
        while self._thread.is_alive() and time.monotonic() < deadline:
            if self._offline_since is not None and not told:
                logger.warning(
                    "MLflow: waiting up to %.0f s for the store to take %d records",
                    deadline - time.monotonic(),
                    self._left(),
                )
                told = True
            self._thread.join(timeout=0.5)
        left = self._left()
        if left:
            logger.warning(
                "MLflow at %s: %d tracking records are kept in %s; the next train or evaluate "
                "stage sends them, or: python -m pipeline.tracking.outbox",
                self.tracker.uri,
                left,
                self.root,
            )
            self.journal.release()
            for journal in self.orphans:
                journal.release()
        else:
            self.journal.release()
            shutil.rmtree(self.journal.folder, ignore_errors=True)
        return left

    def _left(self) -> int:
        return sum(j.pending() for j in [*self.orphans, self.journal])


def _journals(root: Path, skip: str) -> list[Journal]:
    if not root.is_dir():
        return []
    return [Journal(f) for f in sorted(root.iterdir()) if f.is_dir() and f.name != skip]


def _short(err: Exception) -> str:
    """The cause in a few words (``Connection refused``), not urllib3's whole chain."""
    text = str(getattr(err, "message", err))
    cause = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    if cause:
        return cause.group(1).strip()
    status = re.search(r"(?:error code|status code|too many) (\d{3})", text)
    if status:
        return f"HTTP {status.group(1)}"
    lines = text.strip().splitlines()
    first = lines[0] if lines else type(err).__name__
    return textwrap.shorten(first, width=160, placeholder=" ...")  # whole words


def pending_journals(cache_dir: Path) -> bool:
    """Whether records of earlier runs wait under ``cache_dir`` (a cheap check)."""
    root = cache_dir / "tracking"
    return root.is_dir() and any(f.is_dir() for f in root.iterdir())


def send_pending(tracker: Tracker, cache_dir: Path, wait_s: float) -> int:
    """Send the records earlier runs left (waiting up to ``wait_s`` for an unreachable
    store); returns how many are still kept."""
    if not pending_journals(cache_dir):
        return 0
    return Outbox(tracker, cache_dir).close(wait_s)


def main() -> None:
    import argparse

    from pipeline.config.infra import load_infra

    cli = argparse.ArgumentParser(description="Send tracking records that earlier runs kept.")
    cli.add_argument("--params", default="params.yaml")
    cli.add_argument("--infra", default=None)
    cli.add_argument(
        "--wait-minutes",
        type=float,
        default=5.0,
        help="how long to wait for an unreachable store (default 5)",
    )
    args = cli.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    infra = load_infra(args.params, args.infra)
    left = send_pending(Tracker(infra), infra.cache_dir, args.wait_minutes * 60)
    raise SystemExit(1 if left else 0)


if __name__ == "__main__":
    main()
