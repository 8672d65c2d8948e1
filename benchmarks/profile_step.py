"""Where a training step's time goes: ``torch.profiler`` over a few steps, summed by kind.

Profiles ``--steps`` training steps (after ``--warmup``, and one untimed step on each
profiled batch so that their oneDNN primitives are built: ``workloads.prebuild``) of one
model on the batches ``benchmarks.run`` trains on (``benchmarks.workloads``), at one
thread, and prints the operators with the most self time, then the matrix products grouped
by role:

- ``vocabulary``: the fused vocabulary projection and loss (a dimension equal to V);
- ``whole sequence``: products with ``B x T`` or ``B x S`` rows (one per batch);
- ``per step``: products with ``B`` rows, i.e. inside a per-position loop (the decoder
  loop of the Bahdanau wiring or of input feeding; the CPU ``nn.GRU``'s own loop; a
  weight that happens to have a dimension equal to ``B`` lands here too);
- ``batched``: ``bmm`` (attention reads and scores).

    python -m benchmarks.profile_step --wiring bahdanau --scorer additive
    python -m benchmarks.profile_step --batch-tokens 1000 --precision fp32
    python -m benchmarks.profile_step --wiring luong --shapes aten::fill_ aten::copy_

The profiler adds overhead to every operator call, most to the many small ones of a
per-step loop: read the shares, not the milliseconds, and confirm a change with
``benchmarks.run``. Not part of the tests.
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

import torch
from torch.profiler import profile

from benchmarks import workloads
from pipeline.config.params import ModelConfig
from pipeline.runtime.process import prepare_process

PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm")


def product_role(name: str, shapes: list[list[int]], batch: dict[str, int], vocab: int) -> str:
    """Which of the roles of the module docstring a product with these input shapes plays."""
    if name == "aten::bmm":
        return "batched"
    dims = {d for shape in shapes for d in shape}
    if vocab in dims:
        return "vocabulary"
    if dims & {batch["target_positions"], batch["source_positions"]}:
        return "whole sequence"
    return "per step" if batch["sentences"] in dims else "other"


def main(argv: list[str] | None = None) -> None:
    prepare_process()  # as a trial does (pipeline.runtime.process)
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--scorer", default="additive")
    cli.add_argument("--wiring", default="bahdanau", choices=["luong", "bahdanau"])
    cli.add_argument(
        "--cell",
        default="lstm",
        choices=["gru", "lstm"],
        help="recurrent cell (the study's default: lstm)",
    )
    cli.add_argument("--input-feeding", action="store_true")
    cli.add_argument("--hidden-size", type=int, default=256)
    cli.add_argument("--batch-tokens", type=int, default=3000)
    cli.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    cli.add_argument("--warmup", type=int, default=2)
    cli.add_argument("--steps", type=int, default=4)
    cli.add_argument("--top", type=int, default=15, help="operators listed by self time")
    cli.add_argument("--tok-dir", type=Path, default=Path("data/tok"))
    cli.add_argument(
        "--shapes",
        nargs="*",
        default=[],
        metavar="OPERATOR",
        help="also list these operators' time by input shapes",
    )
    args = cli.parse_args(argv)

    torch.set_num_threads(1)
    vocab = workloads.VOCAB_SIZE
    split, source = workloads.load_split(args.tok_dir, "train", vocab)
    batches = workloads.sample_batches(split, args.batch_tokens, args.warmup + args.steps, 1)
    config = ModelConfig(
        scorer=args.scorer,
        wiring=args.wiring,
        cell=args.cell,
        input_feeding=args.input_feeding,
        hidden_size=args.hidden_size,
        embedding_size=256,
    )
    model = workloads.build_model("pipeline", config, vocab)
    optimizer = workloads.make_optimizer("pipeline", model)
    for batch in batches[: args.warmup]:
        workloads.training_step(model, optimizer, batch, args.precision)
    timed = batches[args.warmup :]
    workloads.prebuild(model, optimizer, timed, args.precision)  # shapes built, untimed
    with profile(record_shapes=True) as prof:
        for batch in timed:
            workloads.training_step(model, optimizer, batch, args.precision)

    operators = {e.key: (e.self_cpu_time_total / 1e3, e.count) for e in prof.key_averages()}
    total = sum(ms for ms, _ in operators.values())  # ms of operator self time
    print(
        f"{args.scorer} {args.wiring} {args.cell} h{args.hidden_size}, {args.precision}, "
        f"{args.batch_tokens}-token batches ({source}); {len(timed)} profiled steps, "
        f"{total / len(timed):.0f} ms of operator self time per step\n"
    )
    print_shares("operator", operators, total, len(timed), args.top)

    roles: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    shapes_of = [  # batches differ in shape: a product is classified against each of them
        {
            "sentences": b.src.size(0),
            "source_positions": b.src.numel(),
            "target_positions": b.tgt_in.numel(),
        }
        for b in timed
    ]
    for e in prof.key_averages(group_by_input_shape=True):
        if e.key not in PRODUCTS:
            continue
        shapes = [s for s in e.input_shapes if s]
        found = {product_role(e.key, shapes, b, vocab) for b in shapes_of}
        role = next(
            (r for r in ("vocabulary", "batched", "whole sequence", "per step") if r in found),
            "other",
        )
        roles[role][0] += e.self_cpu_time_total / 1e3
        roles[role][1] += e.count
    print()
    print_shares("matrix products", roles, total, len(timed))
    by_shape = prof.key_averages(group_by_input_shape=True)
    for name in args.shapes:
        shares = {
            str([s for s in e.input_shapes if s]): (e.self_cpu_time_total / 1e3, e.count)
            for e in by_shape
            if e.key == name
        }
        print()
        print_shares(f"{name} by input shapes", shares, total, len(timed), args.top)


def print_shares(title: str, totals, total_ms: float, steps: int, top: int | None = None):
    """A markdown table of ``totals`` (name -> (self ms, calls)), largest first."""
    print(f"| {title} | share | ms per step | calls per step |\n| --- | ---: | ---: | ---: |")
    for name, (ms, calls) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"| {name} | {ms / total_ms:.1%} | {ms / steps:.1f} | {calls / steps:.0f} |")


if __name__ == "__main__":
    main()
