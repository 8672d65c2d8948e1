"""Train one configuration of the baseline exploration until dev BLEU stops rising.

The study's recipe (params.yaml at HEAD: LSTM, 1000-token batches, Adam 0.002 halved on
dev plateaus, the 600-step curriculum, label smoothing 0.1, dropout 0.1, fp32) with its
own plateau stop switched off (patience 10**6, min_learning_rate 0: no floor, so the
learning-rate halvings go on) and this stop rule instead, as a TrainCallback:

  slope rule: at an evaluation at step s >= MIN_STEP whose history holds an evaluation at
  or before s - WINDOW + 100, fit a least-squares line to dev BLEU (all 600 dev sentences,
  greedy, as the trainer computes it) against steps over the evaluations in
  [s - WINDOW, s]; stop when its slope is at most THRESHOLD BLEU per 1,000 updates.

Also: an update cap (--max-steps) and a wall-clock deadline (--deadline, a Unix time;
stop reason 'time_cap'), both followed by the trainer's one last evaluation.

Writes <out>/history.csv (the trainer's), <out>/progress.json after every evaluation
(rows with the slope so far, where it stands) and <out>/result.json at the end.
Checkpoints (checkpoint.pt, last.pt) are written by the trainer and left in <out>.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
import traceback
from pathlib import Path

import numpy as np
import torch

WINDOW = 2000
THRESHOLD = 0.5  # BLEU per 1,000 updates
MIN_STEP = 3000

CONFIGS: dict[str, dict] = {
    # name: model/train overrides, data folder (under --data), eval_every_steps
    "none_h256": {"model": {"scorer": "none"}},
    "none_h256_s2": {"model": {"scorer": "none"}, "train": {"seed": 2}},
    "none_h512": {"model": {"scorer": "none", "hidden_size": 512}},
    "none_h1000": {"model": {"scorer": "none", "hidden_size": 1000}},
    "none_h256_L2": {"model": {"scorer": "none", "layers": 2}},
    "none_h256_L4": {"model": {"scorer": "none", "layers": 4}},
    "none_h1000_L4": {"model": {"scorer": "none", "hidden_size": 1000, "layers": 4}},
    "none_h1000_L4_rev": {
        "model": {"scorer": "none", "hidden_size": 1000, "layers": 4, "reverse_source": True}
    },
    "none_h256_bi": {"model": {"scorer": "none", "bidirectional": True}},
    "none_h256_rev": {"model": {"scorer": "none", "reverse_source": True}},
    "additive_h256": {"model": {"scorer": "additive"}},
    "none_h256_shuf": {"model": {"scorer": "none"}, "data": "tok_shuf"},
    "none_h256_kjv": {"model": {"scorer": "none"}, "data": "tok_kjv", "eval_every": 476},
}


def slope_per_1k(rows: list[dict], window: int = WINDOW) -> tuple[float, int, int]:
    """(slope of dev BLEU per 1,000 updates over the last ``window`` updates, points used,
    span in updates); nan if the history does not reach back ``window - 100`` updates."""
    if not rows:
        return math.nan, 0, 0
    last = rows[-1]["step"]
    if rows[0]["step"] > last - window + 100:
        return math.nan, 0, 0
    pts = [(r["step"], r["dev_bleu"]) for r in rows if r["step"] >= last - window]
    if len(pts) < 3:
        return math.nan, len(pts), 0
    x = np.array([p[0] for p in pts], dtype=float) / 1000.0
    y = np.array([p[1] for p in pts], dtype=float)
    slope = float(np.polyfit(x, y, 1)[0])
    return slope, len(pts), int(pts[-1][0] - pts[0][0])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True, choices=sorted(CONFIGS))
    ap.add_argument("--data", type=Path, required=True, help="folder holding tok, tok_shuf, ...")
    ap.add_argument("--params", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--max-steps", type=int, default=40000)
    ap.add_argument("--deadline", type=float, default=0.0, help="unix time; 0: none")
    ap.add_argument("--eval-every", type=int, default=0, help="0: epoch ends only (~494)")
    ap.add_argument("--min-step", type=int, default=MIN_STEP)
    # for CPU smoke tests only
    ap.add_argument("--hidden", type=int, default=0, help="override hidden_size (tests)")
    ap.add_argument("--dev-bleu-sentences", type=int, default=600)
    ap.add_argument("--window", type=int, default=WINDOW)
    ap.add_argument("--threshold", type=float, default=THRESHOLD)
    ap.add_argument("--lr-patience", type=int, default=-1, help="-1: the study's (1)")
    ap.add_argument("--min-lr-halvings", type=int, default=0,
                    help="the slope rule counts only once the lr is at most lr0 / 2**N")
    args = ap.parse_args()

    torch.set_num_threads(1)
    from pipeline.config.grid import Variant
    from pipeline.config.params import ModelConfig, TrainConfig, read_params
    from pipeline.runtime.process import prepare_process
    from pipeline.train.trainer import TrainCallback, train_variant

    prepare_process()
    spec = CONFIGS[args.config]
    params = read_params(args.params)
    model_over = dict(spec["model"])
    if args.hidden:
        model_over["hidden_size"] = args.hidden
    eval_every = spec.get("eval_every", args.eval_every)
    train_over = {
        "max_steps": args.max_steps,
        "eval_every_steps": eval_every,
        "dev_bleu_sentences": args.dev_bleu_sentences,
        "patience": 10**6,
        "min_learning_rate": 0.0,
        "max_epochs": 10**4,
        "precision": "fp32",
        "grid": {},
        "grid_include": [],
        "only": [],
        **spec.get("train", {}),
    }
    if args.lr_patience >= 0:
        train_over["lr_patience"] = args.lr_patience
    ctx = params.validation_context
    model = ModelConfig.model_validate(dict(params.model.model_dump(), **model_over), context=ctx)
    train = TrainConfig.model_validate(dict(params.train.model_dump(), **train_over), context=ctx)
    variant = Variant(args.config, model, train, {**model_over, **spec.get("train", {})})
    data_dir = args.data / spec.get("data", "tok")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    state = {
        "config": args.config,
        "data": spec.get("data", "tok"),
        "model": model.model_dump(),
        "train": {k: v for k, v in train.model_dump().items() if k not in ("grid", "grid_include")},
        "rule": {"window": args.window, "threshold": args.threshold, "min_step": args.min_step,
                 "min_lr_halvings": args.min_lr_halvings},
        "device": args.device,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "rows": [],
        "stop_reason": None,
        "status": "running",
    }

    def dump(name: str = "progress.json") -> None:
        tmp = out / (name + ".tmp")
        tmp.write_text(json.dumps(state, indent=1, default=float) + "\n")
        os.replace(tmp, out / name)

    class SlopeStop(TrainCallback):
        def on_step(self, trainer, step):
            if args.deadline and time.time() > args.deadline:
                trainer.stop("time_cap")

        def on_evaluation(self, trainer, row):
            rows = trainer.progress.history
            slope, points, span = slope_per_1k(rows, args.window)
            r = {k: row[k] for k in ("step", "epochs", "dev_bleu", "dev_loss", "train_loss",
                                     "learning_rate", "wall_time", "tokens_per_s")}
            r.update(slope_per_1k=slope, slope_points=points, slope_span=span,
                     elapsed_s=time.time() - started)
            state["rows"].append(r)
            if (
                not trainer.progress.stop_reason
                and row["step"] >= args.min_step
                and math.isfinite(slope)
                and slope <= args.threshold
                and row["learning_rate"] <= train.learning_rate / 2**args.min_lr_halvings * 1.0001
            ):
                trainer.stop("slope_rule")
            dump()

    dump()
    try:
        result = train_variant(
            variant, data_dir, out, callbacks=[SlopeStop()], device=args.device, resume=False
        )
    except Exception as err:  # recorded, not raised: the launcher summarises what it has
        state.update(status="failed", error=f"{type(err).__name__}: {err}",
                     traceback=traceback.format_exc())
        dump("result.json")
        print(f"{args.config}: FAILED {err}", flush=True)
        return 1
    rows = state["rows"]
    bleus = [r["dev_bleu"] for r in rows]
    best_i = int(np.argmax(bleus)) if bleus else -1
    final_slope = slope_per_1k(result.history, args.window)[0]
    state.update(
        status="done",
        stop_reason=result.stop_reason,
        steps=result.steps,
        evaluations=result.evaluations,
        best_dev_bleu=bleus[best_i] if bleus else None,
        best_dev_bleu_step=rows[best_i]["step"] if bleus else None,
        last_dev_bleu=bleus[-1] if bleus else None,
        mean_last3_dev_bleu=float(np.mean(bleus[-3:])) if bleus else None,
        final_slope_per_1k=final_slope,
        trainer_best_step=result.best_step,
        trainer_best_dev_bleu=result.best_dev_bleu,
        best_dev_loss=min(r["dev_loss"] for r in rows) if rows else None,
        parameters=result.parameter_count,
        tokens_per_s=result.tokens_per_s,
        wall_time_s=time.time() - started,
        peak_gpu_mib=(torch.cuda.max_memory_allocated() / 2**20) if torch.cuda.is_available() else None,
    )
    dump("result.json")
    print(
        f"{args.config}: {result.stop_reason} at {result.steps} steps, best dev BLEU "
        f"{state['best_dev_bleu']:.2f} (step {state['best_dev_bleu_step']}), final slope "
        f"{final_slope:.2f}/1k, {state['wall_time_s']:.0f} s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
