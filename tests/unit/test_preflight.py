"""The preflight: every model family trains and decodes in its precision before Ray starts;
one line naming the params key when it cannot; the time estimate from measured steps.

Run as on a CPU without bf16 instructions: oneDNN's ``ONEDNN_MAX_CPU_ISA=AVX2`` (in a
subprocess, set before torch loads) makes any x86-64 CPU behave like an AVX2-only one,
where torch's bf16 LSTM has no implementation.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from pipeline.config.params import ModelConfig
from pipeline.data.dataset import TokenizedData
from pipeline.models.attention import Scorer
from pipeline.models.preflight import PreflightError, check_decoding, check_scorer_shapes
from pipeline.runtime.precision import autocast
from pipeline.scorers import register_scorer
from pipeline.train.preflight import (
    EVALUATION_OVERHEAD,
    EXPECTED_SHARE_OF_CAP,
    FamilyCheck,
    check_training,
    estimate,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2"}


def _lstm(variant):
    return replace(variant, model=variant.model.model_copy(update={"cell": "lstm"}))


def test_families_group_variants_that_differ_only_in_seed_or_reversal(make_variant, tiny_tok_dir):
    variants = [make_variant("additive", seed=s) for s in (1, 2)] + [make_variant("none")]
    forward_model = variants[0].model.model_copy(update={"reverse_source": False})
    forward = replace(variants[0], id="additive-fwd", model=forward_model)
    data = TokenizedData.load(tiny_tok_dir)
    checks = check_training([*variants, forward], data, "cpu", threads=1)
    assert sorted(c.variants for c in checks) == [
        (variants[0].id, variants[1].id, "additive-fwd"),
        (variants[2].id,),
    ]
    bigger = replace(
        variants[0], id="big", model=variants[0].model.model_copy(update={"hidden_size": 64})
    )
    assert len(check_training([*variants, bigger], data, "cpu", threads=1)) == 3
    smaller_batches = replace(
        variants[1], train=variants[1].train.model_copy(update={"batch_tokens": 50})
    )
    # another size or batch size is another family: a step computes and costs another thing
    assert len(check_training([variants[0], smaller_batches], data, "cpu", threads=1)) == 2
    decoding = check_decoding(
        {v.id: v.model for v in [*variants, forward]}, data, beam_size=2, precision="fp32"
    )
    assert sorted(len(c.variants) for c in decoding) == [1, 3]  # the same families


def test_every_family_trains_and_is_timed_in_fp32(make_variant, tiny_tok_dir):
    variants = [_lstm(make_variant(s)) for s in ("none", "additive", "general", "location")]
    threads = torch.get_num_threads()
    checks = check_training(variants, TokenizedData.load(tiny_tok_dir), "cpu", threads=1)
    assert torch.get_num_threads() == threads  # restored
    assert [c.name for c in checks] == [v.id for v in variants]
    assert all(c.precision == "fp32" and 0 < c.seconds_per_step < 5 for c in checks)


def test_estimate_counts_half_the_cap_and_the_lanes(make_variant):
    variants = [make_variant("additive", seed=s, max_steps=1000) for s in (1, 2, 3, 4)]
    variants = [replace(v, id=f"v{i}") for i, v in enumerate(variants)]
    checks = [FamilyCheck("v0", tuple(v.id for v in variants), "fp32", 0.36)]
    two = estimate(variants, checks, concurrent=2)
    assert two.expected_steps == 4 * int(1000 * EXPECTED_SHARE_OF_CAP)
    assert two.max_steps == 4000
    per_lane = 2 * 1000 * EXPECTED_SHARE_OF_CAP * 0.36 * (1 + EVALUATION_OVERHEAD)
    assert two.expected_hours == pytest.approx(per_lane / 3600)
    assert two.bound_hours == pytest.approx(2 * two.expected_hours)
    one = estimate(variants, checks, concurrent=1)
    assert one.expected_hours == pytest.approx(2 * two.expected_hours)
    assert estimate(variants, checks, concurrent=16).concurrent == 4  # no more than variants
    assert "4 variants to train" in two.line() and "at most 4,000" in two.line()


def test_a_plugin_scorer_of_the_wrong_shape_is_named_with_its_file():
    @register_scorer("flat", paper="test", formula="wrong shape")
    class Flat(Scorer):
        def score_projected(self, query, keys):
            return query.sum(-1)  # (B, T): the source axis is missing

    from pipeline.scorers import catalogue

    entry = catalogue.get("flat")
    with pytest.raises(PreflightError) as caught:
        check_scorer_shapes(["none", "flat"], 8)
    message = str(caught.value)
    assert message.startswith(f"{entry.plugin}: scorer 'flat'"), message
    assert "(B, T, S) = (2, 3, 5)" in message and "got (2, 3)" in message
    assert "\n" not in message


def test_decoding_preflight_runs_greedy_and_beam_for_each_family(tiny_tok_dir):
    models = {
        "additive-a": ModelConfig(embedding_size=16, hidden_size=16, scorer="additive"),
        "additive-b": ModelConfig(
            embedding_size=16, hidden_size=16, scorer="additive", reverse_source=True
        ),
        "none-a": ModelConfig(embedding_size=16, hidden_size=16, scorer="none", cell="lstm"),
    }
    checks = check_decoding(models, TokenizedData.load(tiny_tok_dir), 3, "fp32")
    assert sorted(c.variants for c in checks) == [("additive-a", "additive-b"), ("none-a",)]


def test_strict_fp32_turns_tf32_off_on_cuda_and_restores_it():
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    with autocast("fp32", "cuda"):
        assert not torch.backends.cudnn.allow_tf32
        assert not torch.backends.cuda.matmul.allow_tf32
    assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == before


def _run_capped(script: str, tiny_tok_dir) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, **AVX2, PYTHONPATH=path, TOK=str(tiny_tok_dir))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_oneDNN_cap_reproduces_the_bf16_lstm_crash():
    """The premise of the tests below: under the cap, torch's CPU bf16 LSTM fails."""
    out = _run_capped(
        """
        import torch
        lstm = torch.nn.LSTM(8, 8)
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                lstm(torch.randn(3, 2, 8))
            print("ran")
        except RuntimeError as err:
            print("failed:", err)
    """,
        None,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("failed: could not create a primitive descriptor"), out.stdout


TRAIN_AND_DECODE = """
    import os, sys, json, tempfile
    from pathlib import Path
    from pipeline.config.grid import Variant
    from pipeline.config.params import ModelConfig, TrainConfig, EvaluateConfig
    from pipeline.data.dataset import TokenizedData
    from pipeline.models.preflight import PreflightError, check_decoding
    from pipeline.train.preflight import check_training
    from pipeline.train.trainer import train_variant
    from pipeline.models.checkpoint import load_checkpoint
    from pipeline.evaluate.decode import decode_split

    data = TokenizedData.load(os.environ["TOK"])
    precision = sys.argv[1] if len(sys.argv) > 1 else "PRECISION"
    model = ModelConfig(embedding_size=16, hidden_size=16, cell="lstm", scorer="additive")
    train = TrainConfig(batch_tokens=60, max_steps=6, precision="PRECISION",
                        dev_bleu_sentences=4)
    variant = Variant("additive-h16", model, train, {"scorer": "additive"})
    try:
        check_training([variant], data)
        check_decoding({variant.id: model}, data, 2, "PRECISION")
    except PreflightError as err:
        print("error:", err)
        sys.exit(1)
    out = Path(tempfile.mkdtemp())
    result = train_variant(variant, data, out)
    loaded = load_checkpoint(out / "checkpoint.pt", expected_vocab=None)
    hypotheses, _ = decode_split(loaded.model, data.split("test"),
                                 EvaluateConfig(beam_size=2, precision="PRECISION"), 2.0, "cpu")
    print(json.dumps({"steps": result.summary.steps, "precision": result.summary.precision,
                      "decoded": len(hypotheses)}))
"""


def test_the_default_numerics_train_and_decode_on_an_avx2_only_cpu(tiny_tok_dir):
    out = _run_capped(TRAIN_AND_DECODE.replace("PRECISION", "fp32"), tiny_tok_dir)
    assert out.returncode == 0, out.stderr[-3000:]
    result = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert result == {"steps": 6, "precision": "fp32", "decoded": 12}


def test_bf16_on_an_avx2_only_cpu_is_one_line_naming_the_key(tiny_tok_dir):
    out = _run_capped(TRAIN_AND_DECODE.replace("PRECISION", "bf16"), tiny_tok_dir)
    assert out.returncode == 1, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: train.precision: bf16 cannot run")
    assert "set train.precision: fp32" in lines[0]


def test_the_safety_limit_grows_on_a_machine_too_slow_for_it(make_variant):
    """A trial's wall-clock safety net never cuts a variant short of its step cap: on a
    slow machine it grows to twice the longest variant's run there."""
    from pipeline.runtime.devices import TaskResources
    from pipeline.sweep.driver import SAFETY_FACTOR, _scaled_timeouts
    from pipeline.sweep.trial import TrialSpec

    variants = [replace(make_variant("additive", max_steps=9000), id=f"v{i}") for i in (1, 2)]
    specs = {
        v.id: TrialSpec(v, "hash", TaskResources(), trial_timeout_minutes=60) for v in variants
    }
    fast = [FamilyCheck("v1", ("v1", "v2"), "fp32", 0.1)]  # 9000 steps: 18.75 min
    slow = [FamilyCheck("v1", ("v1", "v2"), "fp32", 0.5)]  # 93.75 min
    assert estimate(variants, slow, 2).longest_minutes == pytest.approx(
        9000 * 0.5 * (1 + EVALUATION_OVERHEAD) / 60
    )
    kept = _scaled_timeouts(specs, estimate(variants, fast, 2))
    assert {s.trial_timeout_minutes for s in kept.values()} == {60}
    grown = _scaled_timeouts(specs, estimate(variants, slow, 2))
    expected = SAFETY_FACTOR * 9000 * 0.5 * (1 + EVALUATION_OVERHEAD) / 60
    assert [s.trial_timeout_minutes for s in grown.values()] == pytest.approx([expected] * 2)
    off = {k: replace(s, trial_timeout_minutes=0) for k, s in specs.items()}
    assert _scaled_timeouts(off, estimate(variants, slow, 2)) == off  # 0: no limit at all
