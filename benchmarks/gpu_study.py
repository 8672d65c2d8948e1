"""A small study on one GPU, driven through the worker-side functions a Ray trial and a
Ray decode task call (``pipeline.train.trainer.train_variant``,
``pipeline.evaluate.decode.decode_variant``), for machines without Ray, MLflow or DVC
(the device machine: docs/cluster.md, "Measured on a GPU").

For each scorer: the study's model (``params.yaml``, source order forward, hidden
``--hidden``) trains for ``--minutes`` of wall clock on ``data/tok`` on the GPU in the
precision ``auto`` resolves to there (with ``--converge``: until the study's own stop
rules end it, the plateau rule or ``train.max_steps``, ``--minutes`` then only a safety
limit), then its best checkpoint beam-decodes the test
split on the GPU (``evaluate`` settings of ``params.yaml``) and is scored with
sacreBLEU against ``data/raw/test.tsv`` (the evaluate stage's references). Reports per
variant: steps, target tokens/s, the dev-BLEU curve, test BLEU, decoding speed and peak
GPU memory.

    python -m benchmarks.gpu_study --minutes 0.4 --out /tmp/gpu          # six scorers
    python -m benchmarks.gpu_study --scorers additive --batch-tokens 4000 8000 ...
    python -m benchmarks.gpu_study --converge --minutes 8 --scorers additive --out ...

``--device cpu`` runs the same on the CPU (a dry run of the script). Not part of the tests.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from sacrebleu.metrics import BLEU

from benchmarks.workloads import study_variant
from pipeline.config import load_config
from pipeline.config.params import Config
from pipeline.data.dataset import TokenizedData
from pipeline.data.pairs import read_tsv_pairs
from pipeline.evaluate.decode import DecodeSpec, decode_variant
from pipeline.io import write_json, write_text
from pipeline.runtime.devices import TaskResources, claim_device
from pipeline.runtime.precision import resolve
from pipeline.scorers import catalogue
from pipeline.train.trainer import TimeLimit, train_variant

ROOT = Path(__file__).resolve().parent.parent
SCORERS = list(catalogue.BUILTIN)
logger = logging.getLogger("benchmarks.gpu_study")


def run_variant(
    scorer: str, batch_tokens: int, args, config: Config, data: TokenizedData, refs, work: Path
):
    gpus = 1.0 if args.device == "cuda" else 0.0
    device = claim_device(gpus, args.cpus)
    precision = resolve(args.precision or config.train.precision, device)
    name = f"{scorer}-fwd-h{args.hidden}-bt{batch_tokens}-{precision}"
    overrides = {
        "scorer": scorer,
        "hidden_size": args.hidden,
        "batch_tokens": batch_tokens,
        "precision": precision,
    }
    if not args.converge:  # quality in time: no stop rule but the clock
        overrides |= {"max_epochs": 1000, "max_steps": 0, "min_learning_rate": 0}
    variant = study_variant(config, name, {"scorer": scorer}, overrides)
    cuda = device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    limit = TimeLimit(60 * args.minutes, fail=False)  # a benchmark of quality in time
    result = train_variant(
        variant, data, work / name, device=device, resume=False, time_limit=limit
    )
    train_peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
    train_reserved = torch.cuda.max_memory_reserved() / 2**20 if cuda else None

    spec = DecodeSpec(
        name,
        (work / name / "checkpoint.pt").read_bytes(),
        "test",
        config.evaluate,
        config.train.max_decode_ratio,
        (),
        TaskResources(cpus=args.cpus, gpus=gpus),
    )
    decoded = decode_variant(spec, data)
    test_bleu = BLEU().corpus_score(decoded.hypotheses, [refs]).score
    row = {
        "variant": name,
        "scorer": scorer,
        "batch_tokens": batch_tokens,
        "precision": result.precision,
        "steps": result.steps,
        "stop_reason": result.stop_reason,
        "best_step": result.best_step,
        "epochs": result.epochs_run,
        "train_minutes": result.wall_time_s / 60,
        "tokens_per_s": result.tokens_per_s,
        "best_dev_bleu": result.best_dev_bleu,
        "curve": [
            {"minutes": r["wall_time"] / 60, "step": r["step"], "dev_bleu": r["dev_bleu"]}
            for r in result.history
        ],
        "test_bleu": test_bleu,
        "beam_size": config.evaluate.beam_size,
        "decode_s": decoded.stats["decode_seconds"],
        "sentences_per_s": decoded.stats["sentences_per_s"],
        "train_peak_mib": train_peak,  # torch.cuda.max_memory_allocated
        "train_reserved_mib": train_reserved,  # + the allocator's cached blocks
    }
    logger.info(
        "%s: %d steps, %.0f tok/s, best dev BLEU %.2f, test BLEU %.2f, decode %.1f s",
        name,
        row["steps"],
        row["tokens_per_s"],
        row["best_dev_bleu"],
        test_bleu,
        row["decode_s"],
    )
    return row


def render(results: dict[str, Any]) -> str:
    env = results["environment"]
    if results.get("converge"):
        budget = (
            "trained until the study's stop rules ended it (plateau rule, train.max_steps), "
            f"{results['minutes']} min of wall clock as a safety limit"
        )
    else:
        budget = (
            f"{results['minutes']} min of training per variant (wall clock, evaluations included)"
        )
    lines = [
        "# Small study on one GPU",
        "",
        f"{env['device_name']}, torch {env['torch']}, {budget}, hidden {results['hidden']}, "
        f"{results['cpus']} CPU threads. Test BLEU: sacreBLEU on data/raw/test.tsv, "
        "beam search on the GPU.",
        "",
        "| variant | precision | steps | stop | best step | tokens/s | best dev BLEU | test BLEU "
        "| decode s | sentences/s | train peak allocated MiB |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results["rows"]:
        peak = "-" if r["train_peak_mib"] is None else f"{r['train_peak_mib']:.0f}"
        lines.append(
            f"| {r['variant']} | {r['precision']} | {r['steps']} | {r.get('stop_reason', '-')} "
            f"| {r.get('best_step', '-')} | {r['tokens_per_s']:.0f} "
            f"| {r['best_dev_bleu']:.2f} | {r['test_bleu']:.2f} | {r['decode_s']:.1f} "
            f"| {r['sentences_per_s']:.0f} | {peak} |"
        )
    lines += ["", "Dev BLEU curves (minutes: BLEU):", ""]
    for r in results["rows"]:
        points = ", ".join(f"{p['minutes']:.2f}: {p['dev_bleu']:.1f}" for p in r["curve"])
        lines.append(f"- {r['variant']}: {points}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=0.5)
    parser.add_argument(
        "--converge",
        action="store_true",
        help="train until the study's stop rules end a variant; --minutes is then a safety limit",
    )
    parser.add_argument("--scorers", nargs="+", default=SCORERS, choices=SCORERS)
    parser.add_argument("--batch-tokens", type=int, nargs="+", default=[1000])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument(
        "--precision", choices=["auto", "fp32", "bf16"], help="default: train.precision"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    config = load_config(ROOT / "params.yaml")
    data = TokenizedData.load(ROOT / "data" / "tok")
    refs = [t for _, t in read_tsv_pairs(ROOT / "data" / "raw" / "test.tsv")]
    if len(refs) != len(data.split("test")):
        raise SystemExit("data/raw/test.tsv and data/tok/test.npz differ in length")
    cuda = args.device == "cuda"
    results: dict[str, Any] = {
        "minutes": args.minutes,
        "converge": args.converge,
        "hidden": args.hidden,
        "cpus": args.cpus,
        "environment": {
            "torch": torch.__version__,
            "device_name": torch.cuda.get_device_name(0) if cuda else "CPU",
            "cuda": torch.version.cuda,
        },
        "rows": [],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-study-") as folder:
        for batch_tokens in args.batch_tokens:
            for scorer in args.scorers:
                row = run_variant(scorer, batch_tokens, args, config, data, refs, Path(folder))
                results["rows"].append(row)
                write_json(args.out / "gpu_study.json", results)  # kept if a later run fails
    results["total_minutes"] = (time.perf_counter() - start) / 60
    write_json(args.out / "gpu_study.json", results)
    write_text(args.out / "gpu_study.md", render(results))
    print(render(results))


if __name__ == "__main__":
    main()
