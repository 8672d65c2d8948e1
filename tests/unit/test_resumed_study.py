"""tools.resumed_study: a study run as several `make study` segments, each stage's time
summed from the stamped logs, with the machine each segment ran on."""

from __future__ import annotations

import json

from tests.support import REPO_ROOT
from tools import first_run
from tools.resumed_study import build, isa, segment_stages


def _segment(logs, number, start, end, rc, lines, flags="avx2 fma"):
    with (logs / "segments.jsonl").open("a") as handle:
        head = {"segment": number, "start": start, "cpu": "AMD EPYC", "cores": 2}
        handle.write(json.dumps({**head, "flags": flags, "commit": "abc"}) + "\n")
        if end is not None:
            handle.write(json.dumps({"segment": number, "end": end, "rc": rc}) + "\n")
    (logs / f"segment-{number}.log").write_text("".join(f"{t} {text}\n" for t, text in lines))


def test_stage_times_run_from_each_stage_line_to_the_next_or_the_end(tmp_path):
    lines = [(110, "pip install"), (200, "Running stage 'fetch':"), (215, "x"),
             (215, "Running stage 'train':"), (900, "study: 3/14")]  # fmt: skip
    _segment(tmp_path, 1, 100, 1000, 1, lines)
    assert segment_stages(tmp_path / "segment-1.log", 100, 1000) == {
        "setup": 100.0,
        "fetch": 15.0,
        "train": 785.0,
    }
    assert segment_stages(tmp_path / "segment-1.log", 100, None)["train"] == 685.0  # last line


def test_the_record_sums_segments_as_the_readme_row_reads_them(tmp_path):
    _segment(tmp_path, 1, 0, 3600, 1, [(200, "Running stage 'train':")])
    stages = [(5000, "Running stage 'train':"), (8000, "Running stage 'evaluate':"),
              (9000, "Running stage 'report':")]  # fmt: skip
    _segment(tmp_path, 2, 4990, 9030, 0, stages, flags="avx2 avx512f amx_tile")
    record = build(tmp_path, REPO_ROOT)
    assert record["variants"] == 14 and record["environment"]["isa"] == "AVX2 only"
    assert [s["ended"] for s in record["segments"]] == ["exit 1", "finished"]
    assert record["segments"][1]["isa"] == "AVX-512 and AMX"
    out = tmp_path / "results"
    out.mkdir()
    record["segments"][1]["stages_s"].update(fetch=10.0, tokenize=5.0)
    (out / first_run.RESUMED).write_text(json.dumps(record))
    _, summed = first_run.resumed_study(out)
    assert summed["train"] == 3400 + 3000 and summed["setup"] == 200 + 10


def test_isa_names_the_widest_instructions():
    assert isa("fma avx2") == "AVX2 only"
    assert isa("avx2 avx512f") == "AVX-512"
    assert isa("avx2 avx512f amx_tile amx_bf16") == "AVX-512 and AMX"
