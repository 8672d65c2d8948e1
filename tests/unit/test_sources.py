import gzip
import hashlib
import io
import tarfile
import zipfile
from collections import Counter

import pytest

from pipeline.config.params import FetchConfig
from pipeline.data.sources import CorpusError, fix_bible_verse, read_corpus
from tests.support import serve_directory, synthetic_pairs, write_tsv


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_bible_fixes_each_known_dirt():
    fixes = Counter()
    assert fix_bible_verse("dummy verses inserted by amos", 44, fixes) is None
    text = "Selah. Psalm 4 For the Chief Musician; on stringed instruments. A Psalm by David."
    assert fix_bible_verse(text, 19, fixes) == "Selah."
    assert fix_bible_verse("Psalm 4 is mentioned", 1, fixes) == "Psalm 4 is mentioned"
    assert fix_bible_verse("God`s Spirit", 1, fixes) == "God's Spirit"
    assert fix_bible_verse("(51:3) O Dieu! aie pitié", 19, fixes) == "O Dieu! aie pitié"
    assert fix_bible_verse("dijo: \xadMoisés!", 2, fixes) == "dijo: ¡Moisés!"
    assert fix_bible_verse("first -[fruits] and [even]", 3, fixes) == "first -fruits and even"
    assert fixes == Counter(
        placeholder_verse=1,
        psalm_heading_glued=1,
        backtick_apostrophe=1,
        verse_renumbering_marker=1,
        soft_hyphen_exclamation=1,
        translator_brackets=1,
    )


def test_embedded_bible_default_pair():
    raw = read_corpus(FetchConfig())
    assert raw.description["source_language"] == "en"
    assert raw.description["target_language"] == "es"
    assert raw.fixes["placeholder_verse"] == 3
    assert 100 <= raw.fixes["psalm_heading_glued"] <= 160
    assert len(raw.pairs) == 31102 - 3
    assert not any("`" in s or "Psalm 4 For the Chief" in s for s, _ in raw.pairs)


def test_embedded_bible_pairs_carry_their_chapter(tmp_path):
    raw = read_corpus(FetchConfig())
    assert raw.chapters is not None and len(raw.chapters) == len(raw.pairs)
    assert raw.chapters[0] == "1:1" and raw.chapters[-1] == "66:22"
    assert len(set(raw.chapters)) == 1189  # chapters of the Protestant canon
    psalm_23 = [s for s, c in zip(raw.pairs, raw.chapters, strict=True) if c == "19:23"]
    assert len(psalm_23) == 6 and psalm_23[0][0].startswith("Yahweh is my shepherd")
    tsv = write_tsv(tmp_path / "c.tsv", synthetic_pairs(5))
    assert read_corpus(FetchConfig(source="tsv", path=str(tsv))).chapters is None


def test_other_translation_by_name_and_unknown_name():
    raw = read_corpus(FetchConfig(source_translation="kjv", target_translation="louis_segond_1910"))
    assert raw.description["target_language"] == "fr"
    assert not any("(51:3)" in t for _, t in raw.pairs)
    with pytest.raises(
        CorpusError, match="fetch.target_translation: unknown translation 'klingon'"
    ):
        read_corpus(FetchConfig(target_translation="klingon"))


def test_local_tsv_and_moses(tmp_path):
    pairs = synthetic_pairs(20)
    tsv = write_tsv(tmp_path / "c.tsv", pairs)
    assert read_corpus(FetchConfig(source="tsv", path=str(tsv))).pairs == pairs
    (tmp_path / "c.en").write_text("\n".join(s for s, _ in pairs) + "\n")
    (tmp_path / "c.es").write_text("\n".join(t for _, t in pairs) + "\n")
    moses = FetchConfig(
        source="moses", path=str(tmp_path / "c.en"), path_target=str(tmp_path / "c.es")
    )
    assert read_corpus(moses).pairs == pairs


def test_bad_local_corpora_name_the_place(tmp_path):
    with pytest.raises(CorpusError, match=r"absent.tsv: corpus file not found \(fetch.path\)"):
        read_corpus(FetchConfig(source="tsv", path=str(tmp_path / "absent.tsv")))
    bad = tmp_path / "bad.tsv"
    bad.write_text("one\tuno\ntwo without a tab\n")
    with pytest.raises(CorpusError, match=r"bad.tsv:2: expected 2 tab-separated columns"):
        read_corpus(FetchConfig(source="tsv", path=str(bad)))
    binary = tmp_path / "bin.tsv"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(CorpusError, match="not UTF-8"):
        read_corpus(FetchConfig(source="tsv", path=str(binary)))
    (tmp_path / "a.en").write_text("a\nb\n")
    (tmp_path / "a.es").write_text("a\n")
    with pytest.raises(CorpusError, match="2 source lines but 1 target lines"):
        read_corpus(
            FetchConfig(
                source="moses", path=str(tmp_path / "a.en"), path_target=str(tmp_path / "a.es")
            )
        )


def _archives(payload: bytes) -> dict[str, bytes]:
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("README", "about")
        archive.writestr("corpus/pairs.tsv", payload)
    tarred = io.BytesIO()
    with tarfile.open(fileobj=tarred, mode="w:gz") as archive:
        info = tarfile.TarInfo("pairs.tsv")
        info.size = len(payload)
        archive.addfile(info, io.BytesIO(payload))
    return {
        "c.tsv": payload,
        "c.tsv.gz": gzip.compress(payload),
        "c.zip": zipped.getvalue(),
        "c.tar.gz": tarred.getvalue(),
    }


def test_url_fetch_with_checksum_in_every_container(tmp_path):
    pairs = synthetic_pairs(15)
    payload = "".join(f"{s}\t{t}\n" for s, t in pairs).encode()
    for name, data in _archives(payload).items():
        (tmp_path / name).write_bytes(data)
    with serve_directory(tmp_path) as base:
        for name in ("c.tsv", "c.tsv.gz", "c.zip", "c.tar.gz"):
            data = (tmp_path / name).read_bytes()
            config = FetchConfig(source="url", url=f"{base}/{name}", sha256=sha(data))
            raw = read_corpus(config)
            assert raw.pairs == pairs, name
            assert raw.description["sha256"] == sha(data)


def test_url_bad_checksum_missing_file_and_no_server(tmp_path):
    (tmp_path / "c.tsv").write_bytes(b"a\tb\n")
    with serve_directory(tmp_path) as base:
        wrong = "0" * 64
        with pytest.raises(CorpusError, match=f"c.tsv: sha256 mismatch: expected {wrong}, got "):
            read_corpus(FetchConfig(source="url", url=f"{base}/c.tsv", sha256=wrong))
        with pytest.raises(CorpusError, match=r"gone.tsv: download failed \("):
            read_corpus(FetchConfig(source="url", url=f"{base}/gone.tsv", sha256=wrong))
    with pytest.raises(CorpusError, match="download failed"):
        read_corpus(FetchConfig(source="url", url=base + "/c.tsv", sha256=wrong))
    with pytest.raises(CorpusError, match="fetch.sha256: required"):
        read_corpus(FetchConfig(source="url", url=f"{base}/c.tsv"))
    with pytest.raises(CorpusError, match="is not an http"):
        read_corpus(FetchConfig(source="url", url="ftp://x/c.tsv", sha256=wrong))
