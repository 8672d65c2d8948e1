"""The per-step overhead benchmark's fits and its output files (the benchmark itself is not
a test)."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.step_overhead import fit, main, render


def test_fits_recover_the_per_step_per_token_and_per_position_costs():
    """Steps built from known costs: 40 ms per batch, 0.1 ms per token, 0.5 ms per
    padded position. The two-column fit finds all three; the tokens-only fit folds the
    positions into its intercept and slope and says so with an R^2 below 1."""
    shapes = [(250, 30), (500, 62), (1000, 55), (2000, 70), (3000, 48), (700, 90)]
    samples = [
        {"seconds": (40 + 0.1 * n + 0.5 * p) / 1e3, "tokens": n, "positions": p} for n, p in shapes
    ]
    both = fit(samples, ["tokens", "positions"])
    assert both["intercept_ms"] == pytest.approx(40, abs=1e-6)
    assert both["ms_per_tokens"] == pytest.approx(0.1, abs=1e-9)
    assert both["ms_per_positions"] == pytest.approx(0.5, abs=1e-8)
    assert both["r2"] == pytest.approx(1.0)
    tokens_only = fit(samples, ["tokens"])
    assert tokens_only["r2"] < 0.999 and tokens_only["intercept_ms"] > 40


@pytest.fixture
def threads():
    """main() sets one thread, as the benchmark runs; give the later tests theirs back."""
    count = torch.get_num_threads()
    yield
    torch.set_num_threads(count)


def test_a_small_run_writes_both_files_with_every_size(tmp_path, threads):
    """A real (tiny) run: random ids, a 16-unit model, two sizes, two rounds."""
    out = tmp_path / "out"
    main(
        [
            "--wirings",
            "luong",
            "--cells",
            "lstm",
            "--sizes",
            "60",
            "120",
            "--rounds",
            "2",
            "--warmup",
            "1",
            "--hidden-size",
            "16",
            "--precision",
            "fp32",
            "--ceiling-seconds",
            "0.05",
            "--tok-dir",
            str(tmp_path / "none"),
            "--out",
            str(out),
        ]
    )
    results = json.loads((out / "step_overhead.json").read_text())
    (run,) = results["runs"]
    assert [r["size"] for r in run["rows"]] == [60, 120] and run["cell"] == "lstm"
    assert len(run["samples"]) == 4 and all(s["seconds"] > 0 for s in run["samples"])
    assert 0 <= run["other_load"] <= 1
    assert run["rows"][0]["tokens"] < run["rows"][1]["tokens"] <= 120
    text = (out / "step_overhead.md").read_text()
    assert text == render(results)
    for row in run["rows"]:  # every size's row, with its median step time
        assert f"| {row['size']} | " in text and f"{row['step_ms']:.1f}" in text
    assert f"a = **{run['fit_tokens']['intercept_ms']:.1f} ms**" in text
    assert "Other processes' load" in text and "## luong wiring, LSTM;" in text
    del run["other_load"]  # results written before that field still render
    assert "Other processes' load" not in render(results)


@pytest.mark.parametrize(
    "bad",
    [
        ["--sizes", "0", "500"],  # not positive
        ["--sizes", "500"],  # one size: nothing to fit
        ["--sizes", "500", "500"],  # the same size twice
        ["--rounds", "1"],
        ["--warmup", "-1"],
    ],
)
def test_bad_options_exit_before_any_timing(bad, tmp_path):
    with pytest.raises(SystemExit) as exited:
        main([*bad, "--out", str(tmp_path)])
    assert exited.value.code != 0
    assert not any(tmp_path.iterdir())
