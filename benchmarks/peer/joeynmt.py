"""Peer toolkit: train JoeyNMT 2.3 on the study's split, record dev BLEU vs wall-clock minutes.

Run from the repository root under the project's venv::

    python -m benchmarks.peer.joeynmt --minutes 3 --out /tmp/joey-run

JoeyNMT lives in its own venv (``benchmarks/peer/joeynmt_setup.sh``, default
``.joeynmt-venv`` in the project, or ``--venv`` / ``$JOEYNMT_VENV``); this module only writes files
and runs that venv's python as a subprocess, so the project never imports JoeyNMT.

Steps:

1. ``OUT/data/{train,dev}.{en,es}`` from ``data/raw/train.tsv`` and the first 300 lines of
   ``data/raw/dev.tsv`` (the sentences our trainer scores dev BLEU on).
2. ``OUT/config.yaml``: the JoeyNMT configuration closest to the project's additive model
   (``make_config``; every choice is explained in ``benchmarks/peer/README.md``).
3. ``joeynmt train`` at one thread (``OMP_NUM_THREADS=1`` and ``torch.set_num_threads(1)``
   in a small launcher). The launcher stamps ``OUT/model/train_start`` when
   ``TrainManager.train_and_validate`` is entered (data loaded, vocabulary and model built:
   the same origin as our trainer's ``wall_time``). ``--minutes`` after that stamp the
   process gets SIGTERM by its pid (SIGKILL 30 s later if it is still there).
4. ``OUT/curve.csv`` with ``minutes,step,dev_bleu,target_tokens_per_s``: one row per
   validation JoeyNMT finished within the budget. ``minutes`` is the mtime of the
   ``{step}.hyps`` file JoeyNMT writes at the end of each validation, minus the stamp.
   ``dev_bleu`` is re-scored here: JoeyNMT's hypotheses (Moses-detokenized by JoeyNMT)
   against the *raw* dev targets with sacreBLEU's default ``BLEU()`` (13a, cased), exactly
   as ``pipeline.train.dev.dev_bleu`` does; JoeyNMT's own figure scores against its
   tokenize-detokenize round trip of the references, which differs slightly, and is kept
   in the log only. ``target_tokens_per_s`` is the mean of JoeyNMT's "Tokens per Sec" log
   lines since the previous validation (non-pad target tokens incl. </s>, validation time
   excluded; JoeyNMT's tokens are Moses words, the project's are BPE pieces).
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from sacrebleu.metrics import BLEU

from pipeline.data.pairs import read_tsv_pairs

logger = logging.getLogger("benchmarks.peer.joeynmt")

REPO = Path(__file__).resolve().parents[2]
DEFAULT_VENV = Path(os.environ.get("JOEYNMT_VENV", ".joeynmt-venv"))
SRC, TRG = "en", "es"
DEV_SENTENCES = 300  # params.yaml train.dev_bleu_sentences
# Measured on this 2-core machine at one thread (README, 2026-11-23): ~110 optimizer steps a
# minute of training plus ~10-15 s per validation, so 90 steps give a point every ~1 minute.
DEFAULT_VALIDATION_FREQ = 90
# JoeyNMT's token batches (shuffled, unsorted; a batch closes once len * longest(max(src,
# trg) + 1) >= 1000) hold ~37 padded tokens a training pair: 790 steps an epoch here.
PADDED_TOKENS_PER_PAIR = 37
CSV_FIELDS = ("minutes", "step", "dev_bleu", "target_tokens_per_s")

# Run with `python -P -c`: -P keeps the caller's directory off sys.path, so this very file
# (benchmarks/peer/joeynmt.py) can never shadow the joeynmt package.
LAUNCHER = r"""
import sys, time
from pathlib import Path
import torch
torch.set_num_threads(1)
torch.set_num_interop_threads(1)
from joeynmt import training
from joeynmt.__main__ import main

stamp = Path(sys.argv[1])
original = training.TrainManager.train_and_validate

def stamped(self, *args, **kwargs):
    stamp.write_text(repr(time.time()))
    return original(self, *args, **kwargs)

training.TrainManager.train_and_validate = stamped
sys.argv = ["joeynmt", "train", sys.argv[2], "--skip-test"]
main()
"""

TOKENS_LINE = re.compile(r"Step:\s+(\d+),.*Tokens per Sec:\s+([\d.]+)")
VALIDATION_LINE = re.compile(r"Steps: (\d+)\t.*?bleu: ([\d.]+)")


def write_data(raw_dir: Path, data_dir: Path, dev_sentences: int) -> list[str]:
    """JoeyNMT plain-text files; returns the dev references (raw targets) for re-scoring."""
    data_dir.mkdir(parents=True, exist_ok=True)
    splits = {
        "train": read_tsv_pairs(raw_dir / "train.tsv"),
        "dev": read_tsv_pairs(raw_dir / "dev.tsv")[:dev_sentences],
    }
    for name, pairs in splits.items():
        for side, lang in enumerate((SRC, TRG)):
            text = "".join(pair[side] + "\n" for pair in pairs)
            (data_dir / f"{name}.{lang}").write_text(text, encoding="utf-8")
        logger.info(
            "wrote %d %s pairs to %s/%s.{%s,%s}", len(pairs), name, data_dir, name, SRC, TRG
        )
    return [target for _, target in splits["dev"]]


def make_config(
    data_dir: Path,
    model_dir: Path,
    *,
    validation_freq: int,
    plateau_patience: int,
    seed: int = 1,
) -> dict:
    """The JoeyNMT configuration closest to the project's additive model (params.yaml).

    Project: GRU, embeddings 256, hidden 256, 1 layer, unidirectional encoder, Luong wiring
    with the additive scorer, no input feeding, dropout 0.2, s_0 = tanh(W h_S), untied
    embeddings, Adam 2e-3, 1000-token batches, clip 1.0, label smoothing 0.1, LR x0.5 when
    dev BLEU does not improve, greedy decoding, seed 1.
    """
    side = {
        "level": "word",  # the setup that trained in a first trial; README: why not BPE
        "lowercase": False,  # our BLEU is cased
        "normalize": False,
        "max_length": -1,  # the raw train split is already cut at 30 source words
        "min_length": 1,
        "voc_limit": 8000,
        "voc_min_freq": 1,
        "tokenizer_cfg": {"pretokenizer": "moses"},  # Moses-tokenized in, detokenized out
    }
    embeddings = {"embedding_dim": 256, "scale": False, "freeze": False}
    return {
        "name": "attention_study_peer_joeynmt_additive",
        "joeynmt_version": "2.3.0",
        "model_dir": str(model_dir),
        "use_cuda": False,
        "fp16": False,
        "random_seed": seed,
        "data": {
            "train": str(data_dir / "train"),
            "dev": str(data_dir / "dev"),
            "dataset_type": "plain",
            "src": {**side, "lang": SRC},
            "trg": {**side, "lang": TRG},
        },
        "testing": {
            "n_best": 1,
            "beam_size": 1,  # greedy, as our dev BLEU
            "beam_alpha": -1,
            "batch_size": 50,
            "batch_type": "sentence",
            "max_output_length": -1,  # JoeyNMT: 1.5 x longest source of the batch
            "eval_metrics": ["bleu"],
            "sacrebleu_cfg": {"tokenize": "13a"},
        },
        "training": {
            "optimizer": "adam",
            "adam_betas": [0.9, 0.999],
            "learning_rate": 0.002,
            "learning_rate_min": 1.0e-8,  # the wall clock ends the run, not the LR floor
            "weight_decay": 0.0,
            "clip_grad_norm": 1.0,
            "label_smoothing": 0.1,
            "loss": "crossentropy",
            "normalization": "tokens",  # token-mean loss, as ours (matters for clipping)
            "batch_size": 1000,
            "batch_type": "token",
            "batch_multiplier": 1,
            "scheduling": "plateau",  # needs the setup script's ReduceLROnPlateau patch
            "decrease_factor": 0.5,
            "patience": plateau_patience,
            "early_stopping_metric": "bleu",
            "epochs": 1000,  # the wall clock ends the run
            "updates": 10**9,
            "validation_freq": validation_freq,
            "logging_freq": 10,
            "shuffle": True,
            "num_workers": 0,
            "keep_best_ckpts": 1,
            "overwrite": True,
            "print_valid_sents": [0],
        },
        "model": {
            "initializer": "xavier_uniform",  # JoeyNMT's default for weight matrices
            "init_gain": 1.0,
            "bias_initializer": "zeros",
            # N(0, 1) = torch's nn.Embedding default, what the project's model uses; with
            # JoeyNMT's xavier default the model sat on a unigram plateau (a first trial)
            "embed_initializer": "normal",
            "embed_init_weight": 1.0,
            "tied_embeddings": False,
            "tied_softmax": False,
            "encoder": {
                "type": "recurrent",
                "rnn_type": "gru",
                "embeddings": dict(embeddings),
                "hidden_size": 256,  # per direction in JoeyNMT
                "bidirectional": False,
                "num_layers": 1,
                "dropout": 0.2,  # embedding dropout (JoeyNMT's default for it) + between layers
            },
            "decoder": {
                "type": "recurrent",
                "rnn_type": "gru",
                "embeddings": dict(embeddings),
                "hidden_size": 256,
                "attention": "bahdanau",  # additive scorer, query = current h_t (Luong wiring)
                "input_feeding": False,
                "init_hidden": "bridge",  # s_0 = tanh(W h_S), as our Bridge
                "num_layers": 1,
                "dropout": 0.2,  # embedding dropout + between layers, as in the encoder
                "hidden_dropout": 0.2,  # on the input of the attentional layer
            },
        },
    }


def _stop(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM the training process by its pid; SIGKILL it if it outlives ``grace_s``."""
    if proc.poll() is not None:
        return
    logger.info("wall-clock budget reached: SIGTERM to pid %d", proc.pid)
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        logger.warning("pid %d still running after %.0f s: SIGKILL", proc.pid, grace_s)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def run_training(
    python: Path,
    config_path: Path,
    model_dir: Path,
    log_path: Path,
    *,
    minutes: float,
    startup_timeout_s: float,
) -> float:
    """Run JoeyNMT; return the training-start stamp (epoch seconds)."""
    if model_dir.exists():  # no stale stamp or .hyps from an earlier run in this --out
        shutil.rmtree(model_dir)
    stamp = model_dir / "train_start"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONNOUSERSITE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    env.pop("PYTHONPATH", None)
    command = [str(python), "-P", "-c", LAUNCHER, str(stamp), str(config_path)]
    launched = time.time()
    with log_path.open("w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=config_path.parent
        )
        logger.info("started JoeyNMT (pid %d), output in %s", proc.pid, log_path)
        try:
            start = None
            while proc.poll() is None:
                if start is None and stamp.is_file() and stamp.read_text().strip():
                    start = float(stamp.read_text())
                    logger.info("training started %.1f s after launch", start - launched)
                if start is None and time.time() - launched > startup_timeout_s:
                    logger.error("no training start after %.0f s", startup_timeout_s)
                    break
                if start is not None and time.time() - start >= 60 * minutes:
                    break
                time.sleep(0.5)
        finally:
            _stop(proc)
    if not stamp.is_file():
        raise RuntimeError(f"JoeyNMT never started training (rc {proc.returncode}): see {log_path}")
    if proc.returncode not in (0, -signal.SIGTERM, -signal.SIGKILL):
        logger.warning("JoeyNMT exited with %s: see %s", proc.returncode, log_path)
    return float(stamp.read_text())


def parse_run(model_dir: Path, start: float, references: list[str], minutes: float) -> list[dict]:
    """One row per finished validation within the budget (see the module docstring)."""
    train_log = (model_dir / "train.log").read_text(encoding="utf-8", errors="replace")
    throughput = [(int(s), float(t)) for s, t in TOKENS_LINE.findall(train_log)]
    joey_bleu = {}
    validations = model_dir / "validations.txt"
    if validations.is_file():
        joey_bleu = {int(s): float(b) for s, b in VALIDATION_LINE.findall(validations.read_text())}
    scorer = BLEU()  # = pipeline.train.dev.dev_bleu: 13a, cased, corpus-level
    rows, previous = [], 0
    hyp_files = sorted(
        (p for p in model_dir.glob("*.hyps") if p.stem.isdigit()), key=lambda p: int(p.stem)
    )
    for path in hyp_files:
        step = int(path.stem)
        elapsed = (path.stat().st_mtime - start) / 60
        hypotheses = path.read_text(encoding="utf-8").split("\n")[: len(references)]
        if elapsed > minutes or len(hypotheses) < len(references):
            logger.info("step %d: outside the budget or cut short, not counted", step)
            continue
        bleu = scorer.corpus_score(hypotheses, [references]).score
        rates = [rate for s, rate in throughput if previous < s <= step]
        rows.append(
            {
                "minutes": round(elapsed, 3),
                "step": step,
                "dev_bleu": round(bleu, 2),
                "target_tokens_per_s": round(sum(rates) / len(rates)) if rates else "",
            }
        )
        logger.info(
            "step %d: %.2f min, BLEU %.2f re-scored (JoeyNMT's own: %s)",
            step,
            elapsed,
            bleu,
            joey_bleu.get(step, "n/a"),
        )
        previous = step
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.peer.joeynmt",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--minutes",
        type=float,
        required=True,
        help="wall-clock training budget, from JoeyNMT's training start",
    )
    ap.add_argument("--out", type=Path, required=True, help="run directory (created)")
    ap.add_argument(
        "--venv",
        type=Path,
        default=DEFAULT_VENV,
        help="JoeyNMT venv (benchmarks/peer/joeynmt_setup.sh); $JOEYNMT_VENV",
    )
    ap.add_argument("--raw-dir", type=Path, default=REPO / "data" / "raw")
    ap.add_argument("--dev-sentences", type=int, default=DEV_SENTENCES)
    ap.add_argument(
        "--validation-freq",
        type=int,
        default=DEFAULT_VALIDATION_FREQ,
        help="steps between validations (default: ~1 minute at one thread)",
    )
    ap.add_argument(
        "--plateau-patience",
        type=int,
        default=None,
        help="validations without a better BLEU before the LR halves "
        "(default: about one epoch's worth, as our per-epoch check)",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--startup-timeout",
        type=float,
        default=600.0,
        help="seconds allowed for data loading and model building",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = parse_args(argv)
    python = args.venv / "bin" / "python"
    if not python.is_file():
        logger.error(
            "%s not found: run bash benchmarks/peer/joeynmt_setup.sh %s", python, args.venv
        )
        return 2
    out = args.out.resolve()
    data_dir, model_dir = out / "data", out / "model"
    out.mkdir(parents=True, exist_ok=True)
    references = write_data(args.raw_dir.resolve(), data_dir, args.dev_sentences)

    patience = args.plateau_patience
    if patience is None:  # our trainer checks once an epoch; JoeyNMT every validation_freq
        train_pairs = (data_dir / f"train.{SRC}").read_text(encoding="utf-8").count("\n")
        steps_per_epoch = train_pairs * PADDED_TOKENS_PER_PAIR / 1000
        patience = max(0, round(steps_per_epoch / args.validation_freq) - 1)
    cfg = make_config(
        data_dir,
        model_dir,
        validation_freq=args.validation_freq,
        plateau_patience=patience,
        seed=args.seed,
    )
    config_path = out / "config.yaml"
    config_path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    logger.info(
        "config %s: validation every %d steps, plateau patience %d",
        config_path,
        args.validation_freq,
        patience,
    )

    start = run_training(
        python,
        config_path,
        model_dir,
        out / "joeynmt.log",
        minutes=args.minutes,
        startup_timeout_s=args.startup_timeout,
    )
    rows = parse_run(model_dir, start, references, args.minutes)
    write_csv(rows, out / "curve.csv")
    (out / "run.json").write_text(
        json.dumps(
            {
                "toolkit": "joeynmt",
                "minutes": args.minutes,
                "threads": 1,
                "validation_freq": args.validation_freq,
                "plateau_patience": patience,
                "dev_sentences": len(references),
                "train_start_epoch_s": start,
                "bleu": "sacrebleu BLEU() 13a, cased, vs raw dev targets",
            },
            indent=2,
        )
        + "\n"
    )
    logger.info("wrote %s (%d points)", out / "curve.csv", len(rows))
    print(",".join(CSV_FIELDS))
    for row in rows:
        print(",".join(str(row[k]) for k in CSV_FIELDS))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
