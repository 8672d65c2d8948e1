"""The sweep's records outside ``models/``: finished variants by config hash, resume points.

``models/`` is a DVC output that the evaluate stage depends on, so it holds only what a
variant *is* (weights, history, config, summary): a train rerun that trains nothing
rewrites it byte for byte and reruns nothing downstream. What changes from run to run
lives here, under ``cache_dir`` of infra.yaml (default ``.study_cache/`` in the project
root, which inside ``dvc exp run --temp``/``--queue`` is the user's repo):

- ``variants/<config_hash>/``: every variant ever finished, keyed by the hash of its
  full config and data. The train stage copies a variant from here instead of training
  it, so DVC may delete ``models/`` before a run (its run-cache stays on), and every DVC
  experiment reuses what any other one trained.
- ``resume/<config_hash>.json``: the latest Tune checkpoint URI of an unfinished
  variant, written by the driver after each epoch; a sweep whose driver was killed
  resumes from it.
- ``last_sweep.json``: what the last train run did (trained, cached, failed, attempts,
  MLflow runs): a log, not an input of any stage.

Files are written atomically; when two queued experiments finish the same config at
once, the first complete copy stays and the other writer keeps it.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from pipeline.artifacts import VariantFiles
from pipeline.io import DiskFullError, atomic_dir, link_or_copy, write_json
from pipeline.records.train import Trained

logger = logging.getLogger(__name__)

_SCHEMES = {"s3": "s3://", "gcs": "gs://", "local": ""}
"""pyarrow filesystem type -> URI prefix of a checkpoint path (others are not recorded:
their trials resume only within one run, through Tune's own retry)."""


def checkpoint_uri(checkpoint: Any) -> str | None:
    """A URI from which ``tune.Checkpoint(uri)`` finds ``checkpoint`` again."""
    filesystem = getattr(checkpoint, "filesystem", None)
    prefix = _SCHEMES.get(getattr(filesystem, "type_name", "local"))
    return None if prefix is None else prefix + str(checkpoint.path)


def copy_folder(
    source: Path,
    dest: Path,
    names: tuple[str, ...] | None = None,
    manifest: dict[str, str] | None = None,
) -> None:
    """Replace ``dest`` with the files of ``source`` (only ``names``, if given; hard links
    where the filesystem allows: checkpoints are large and never modified in place),
    atomically; with ``manifest``, also :data:`VariantFiles.MANIFEST`. A full disk is one
    :class:`~pipeline.io.DiskFullError` naming ``dest``, and leaves nothing of it."""
    files = [
        path
        for path in sorted(source.iterdir())
        if path.is_file() and (names is None or path.name in names)
    ]
    with atomic_dir(dest) as tmp:
        if manifest is not None:
            write_json(tmp / VariantFiles.MANIFEST, manifest)
        link_or_copy(((path, tmp / path.name) for path in files), tmp)


class VariantCache:
    def __init__(self, folder: Path):
        self.folder = folder

    # ---------------------------------------------------------------- finished
    def files(self, config_hash: str) -> VariantFiles:
        return VariantFiles(self.folder / "variants" / config_hash)

    def holds(self, config_hash: str) -> bool:
        """Whether a finished variant of this config hash is cached."""
        return self.files(config_hash).finished(config_hash) is not None

    def store(self, source: Path, config_hash: str) -> None:
        """Keep the finished variant in ``source`` (its :data:`VariantFiles.KEPT` files)
        with the sha256 of each (:data:`VariantFiles.MANIFEST`)."""
        try:
            copy_folder(
                source,
                self.files(config_hash).folder,
                VariantFiles.KEPT,
                manifest=VariantFiles(source).digests(),
            )
        except (OSError, DiskFullError):
            if not self.holds(config_hash):
                raise
            # another writer (a queued experiment) stored the same config meanwhile

    def restore(self, config_hash: str, dest: Path) -> Trained | None:
        """Copy the cached variant into ``dest``; its result, or ``None`` if not cached.
        An entry whose files fail their recorded sha256 is not cached: it is removed
        (one warning naming it) and the variant retrains."""
        entry = self.files(config_hash)
        result = entry.finished(config_hash)
        if result is None:
            return None
        damage = entry.damaged()
        if damage:
            logger.warning(
                "variant cache entry %s: %s; removed, the variant retrains", entry.folder, damage
            )
            shutil.rmtree(entry.folder, ignore_errors=True)
            return None
        copy_folder(entry.folder, dest)
        return result

    # ------------------------------------------------------------------ resume
    def _resume_path(self, config_hash: str) -> Path:
        return self.folder / "resume" / f"{config_hash}.json"

    def resume_uri(self, config_hash: str) -> str | None:
        try:
            return json.loads(self._resume_path(config_hash).read_text()).get("checkpoint")
        except (OSError, ValueError):
            return None

    def set_resume(self, config_hash: str, variant_id: str, uri: str | None) -> None:
        if uri is None:
            self._resume_path(config_hash).unlink(missing_ok=True)
        else:
            write_json(self._resume_path(config_hash), {"variant": variant_id, "checkpoint": uri})

    def resumable(self) -> dict[str, str]:
        """``{variant id: checkpoint URI}`` of every recorded unfinished variant."""
        out = {}
        for path in sorted((self.folder / "resume").glob("*.json")):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            out[record.get("variant", path.stem)] = record.get("checkpoint")
        return out

    # --------------------------------------------------------------------- log
    @property
    def last_sweep(self) -> Path:
        return self.folder / "last_sweep.json"

    def write_last_sweep(self, record: dict[str, Any]) -> None:
        write_json(self.last_sweep, record)


def adopt(models_dir: Path, cache: VariantCache) -> list[str]:
    """Store every finished variant folder of ``models_dir`` in the cache (each under the
    config hash its ``result.json`` names); returns the adopted variant ids. For
    checkouts whose ``models/`` predates the cache, before DVC next deletes it."""
    adopted = []
    for result in sorted(models_dir.glob(f"*/{VariantFiles.RESULT}")):
        folder = result.parent
        trained = VariantFiles(folder).trained()
        if trained is None:
            logger.warning("%s: unreadable, skipped", result)
            continue
        config_hash = trained.config_hash
        if not cache.holds(config_hash):
            cache.store(folder, config_hash)
        adopted.append(folder.name)
    return adopted


def main() -> None:
    import argparse

    from pipeline.config.infra import load_infra

    cli = argparse.ArgumentParser(description="Adopt finished variants into the variant cache.")
    cli.add_argument("models", type=Path, nargs="?", default=Path("models"))
    cli.add_argument("--params", default="params.yaml")
    cli.add_argument("--infra", default=None)
    args = cli.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cache = VariantCache(load_infra(args.params, args.infra).cache_dir)
    adopted = adopt(args.models, cache)
    logger.info("%d variants of %s in %s", len(adopted), args.models, cache.folder)


if __name__ == "__main__":
    main()
