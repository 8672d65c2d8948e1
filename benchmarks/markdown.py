"""Markdown tables of a ``benchmarks.run`` result (``benchmarks/results/run/latest.md``)."""

from __future__ import annotations

import re
from typing import Any

Rows = list[list[Any]]


NUMBER = re.compile(r"^-?\d[\d.]*(e[-+]\d+)?(%|x| s| min)?( - [\d.]+| \([\d.]+\))?$")
"""A cell that reads as a number: 12, 3.4%, 1.5x, 9.8e-08, 2 s, 1.7 min, 389 - 401, 8 (9)."""


def _numeric(cell: Any) -> bool:
    return bool(NUMBER.match(str(cell)))


def table(header: str, rows: Rows) -> list[str]:
    """A Markdown table (``header``: names joined by ``|``); number columns right-aligned."""
    align = ["---:" if _numeric(cell) else "---" for cell in rows[0]]
    lines = [f"| {header.replace('|', ' | ')} |", "| " + " | ".join(align) + " |"]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def gflops(value: float) -> str:
    return f"{value / 1e9:.1f}"


def percent(value: float) -> str:
    return f"{100 * value:.0f}%"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def max_other_load(results: dict[str, Any]) -> float:
    """The highest ``other_load`` of any trial (see ``benchmarks.trials``)."""
    trials = [*results["training"], *results["decoding"]]
    trials += [r["reference"] for r in results["reference"]]
    trials += [r["pipeline"][side] for r in results["reference"] for side in ("before", "after")]
    trials += [results["ceiling"]["one_thread"], results["ceiling"]["two_threads"]]
    threads = results["threads"]
    trials += [*threads["mixed_pair"], *threads["pair_one_thread"], threads["alone_one_thread"]]
    trials.append(threads["one_process_two_threads"])
    return max(t.get("other_load", 0.0) for t in trials)


def find(rows: list[dict[str, Any]], scorer: str, wiring: str, hidden: int) -> dict[str, Any]:
    """The trial of ``scorer`` x ``wiring`` x ``hidden`` (``none`` matches any wiring)."""
    for row in rows:
        if (row["scorer"], row["hidden_size"]) == (scorer, hidden) and (
            scorer == "none" or row["wiring"] == wiring
        ):
            return row
    raise KeyError((scorer, wiring, hidden))


def summary(results: dict[str, Any]) -> list[str]:
    """The headline numbers, one row each."""
    ceiling, threads, training = results["ceiling"], results["threads"], results["training"]
    hidden, precision = max(results["setup"]["hidden_sizes"]), results["setup"]["precision"]
    main, plain = find(training, "additive", "luong", hidden), find(training, "none", "", hidden)
    additive = [r for r in results["reference"] if r["scorer"] == "additive"]
    greedy, beam = {r["scorer"]: r for r in results["decoding"]}["additive"]["searches"]
    memory = ", ".join(
        f"h{h} {find(training, 'additive', 'luong', h)['peak_rss_mib']:.0f} MiB"
        for h in results["setup"]["hidden_sizes"]
    )
    two = threads["one_process_two_threads"]["tokens_per_s"]

    def rates(one: str, two: str) -> str:
        return f"{gflops(ceiling[one]['flops_per_s'])} / {gflops(ceiling[two]['flops_per_s'])}"

    def used(flops_per_s: float, count: int) -> str:
        """Share of the ceiling of the dtype the products run in (bf16 first), and fp32's."""
        fp32 = ceiling["one_thread" if count == 1 else "two_threads"]["flops_per_s"]
        text = f"{percent(flops_per_s / fp32)} of the {count}-thread fp32 ceiling"
        if precision == "bf16":
            key = "bf16_one_thread" if count == 1 else "bf16_two_threads"
            bf16 = flops_per_s / ceiling[key]["flops_per_s"]
            text = f"{percent(bf16)} of the {count}-thread bf16 ceiling, " + text
        return text

    rows = [
        ["fp32 matmul ceiling, 1 / 2 threads", rates("one_thread", "two_threads") + " GFLOP/s"],
        [
            "bf16 matmul, 1 / 2 threads (for comparison)",
            rates("bf16_one_thread", "bf16_two_threads") + " GFLOP/s",
        ],
    ]
    for name, r in (("additive luong", main), ("none", plain)):
        flops = r["flops_per_s"]
        result = f"{r['tokens_per_s']:.0f} tok/s, {gflops(flops)} GFLOP/s ({used(flops, 1)})"
        rows.append([f"training, {name} h{hidden}, 1 thread, {precision}", result])
    mixed = threads["mixed_pair_flops_per_s"]
    rows.append(
        [
            f"2 concurrent 1-thread trials (additive + none luong h{hidden}), {precision}",
            f"{gflops(mixed)} GFLOP/s, {used(mixed, 2)}",
        ]
    )
    speedups = [(precision, "speedup")] + ([("fp32", "speedup_fp32")] * (precision != "fp32"))
    for dtype, key in speedups:  # in fp32 the two are one
        rows.append(
            [
                f"pipeline ({dtype}) / per-step fp32 reference, additive h{hidden} "
                "(luong / bahdanau)",
                " / ".join(f"{r[key]:.1f}x" for r in additive),
            ]
        )
    rows += [
        [
            f"decoding, additive h{hidden}, greedy / beam 5 ({greedy.get('precision', 'fp32')})",
            f"{greedy['sentences_per_s']:.0f} / {beam['sentences_per_s']:.1f} sentences/s",
        ],
        ["peak RSS of a training trial (additive luong)", memory],
        [
            f"2 x 1-thread trials vs 1 x 2-thread trial (additive h{hidden})",
            f"{threads['pair_tokens_per_s']:.0f} vs {two:.0f} tok/s "
            f"({threads['pair_over_two_threads']:.2f}x)",
        ],
    ]
    return table("measure|result", rows)


def ceiling_section(results: dict[str, Any]) -> list[str]:
    ceiling = results["ceiling"]
    size = ceiling["one_thread"]["size"]
    arrangements = [
        ("1 process x 1 thread", ceiling["one_thread"]),
        ("1 process x 2 threads", ceiling["two_threads"]),
        ("bf16, 1 process x 1 thread(s)", ceiling["bf16_one_thread"]),
        ("bf16, 1 process x 2 thread(s)", ceiling["bf16_two_threads"]),
    ]
    rows = [[name, gflops(r["flops_per_s"]), percent(r["other_load"])] for name, r in arrangements]
    pair = ceiling["two_processes"][0]
    total = gflops(ceiling["two_processes_flops_per_s"])
    rows.insert(2, ["2 processes x 1 thread, at once (sum)", total, percent(pair["other_load"])])
    title = f"## 1. Ceiling: fp32 matmul {size}x{size} @ {size}x{size} (median)"
    note = (
        "Training fractions below are of the ceiling of the dtype the products run in "
        "(bf16 when `precision` resolved to bf16) and of the fp32 ceiling."
    )
    return [title, ""] + table("arrangement|GFLOP/s|other load", rows) + ["", note]


def training_section(results: dict[str, Any]) -> list[str]:
    training, threads = results["training"], results["threads"]
    precision = results["setup"]["precision"]
    bf16_ceiling = results["ceiling"]["bf16_one_thread"]["flops_per_s"]

    def fractions(r: dict[str, Any]) -> list[str]:
        """Of the ceiling of the dtype the products run in (bf16 first, when bf16), fp32's."""
        fp32 = percent(r["ceiling_fraction"])
        return [percent(r["flops_per_s"] / bf16_ceiling), fp32] if precision == "bf16" else [fp32]

    rows = [
        [
            r["scorer"],
            "-" if r["scorer"] == "none" else r["wiring"],
            r["hidden_size"],
            f"{r['tokens_per_s']:.0f}",
            gflops(r["flops_per_step"]),
            gflops(r["flops_per_s"]),
            *fractions(r),
            f"{r['peak_rss_mib']:.0f}",
            percent(r["other_load"]),
        ]
        for r in training
    ]
    first = training[0]
    lines = [
        f"## 2. Training, 1 thread, precision {precision}",
        "",
        f"Data: {first['data']}; timed batches: {first['mean_sentences']:.0f} sentences, "
        f"{first['mean_source_positions']:.0f} x {first['mean_target_positions']:.0f} "
        "padded source x target positions on average; padding "
        f"{percent(first.get('source_padding', 0))} of source and "
        f"{percent(first.get('target_padding', 0))} of target positions.",
        "",
    ]
    shares = "of 1-thread fp32 ceiling"
    if precision == "bf16":
        shares = "of 1-thread bf16 ceiling|" + shares
    lines += table(
        f"scorer|wiring|hidden|target tokens/s|GFLOP/step|GFLOP/s|{shares}|peak RSS MiB|other load",
        rows,
    )
    ratios = [executed_ratio(r) for r in training]
    lines += [
        "",
        f"FLOP formula check: torch's FlopCounterMode / benchmarks.flops on each trial's "
        f"first batch = {min(ratios):.3f} - {max(ratios):.3f}.",
    ]
    pair_rows = [
        [
            r["scorer"],
            f"{find(training, r['scorer'], r['wiring'], r['hidden_size'])['tokens_per_s']:.0f}",
            f"{r['tokens_per_s']:.0f}",
            gflops(r["flops_per_s"]),
            percent(r["overlap"]),
            percent(r["other_load"]),
        ]
        for r in threads["mixed_pair"]
    ]
    pair_rows.append(["both", "", "", gflops(threads["mixed_pair_flops_per_s"]), "", ""])
    r = threads["mixed_pair"][-1]
    lines += [
        "",
        f"Two 1-thread trials at once (luong, hidden {r['hidden_size']}, "
        f"{r['window_seconds']:.0f} s windows): together "
        f"{percent(threads['mixed_pair_ceiling_fraction'])} of the 2-thread ceiling.",
        "",
    ]
    return lines + table(
        "trial|tok/s alone|tok/s at once|GFLOP/s at once|overlap|other load", pair_rows
    )


def executed_ratio(trial: dict[str, Any]) -> float:
    """Matmul FLOPs the trial executed (torch's counter) / the model's FLOPs (formula)."""
    return trial["counted_flops_first_batch"] / trial["model_flops_first_batch"]


def reference_section(results: dict[str, Any]) -> list[str]:
    rows = [
        [
            r["scorer"],
            r["wiring"],
            r["hidden_size"],
            bracket(r["pipeline"]),
            f"{r['pipeline_fp32']['tokens_per_s']:.0f}",
            f"{r['reference']['tokens_per_s']:.0f}",
            f"{r['speedup']:.2f}x",
            f"{r['speedup_fp32']:.2f}x",
            f"{executed_ratio(r['reference']):.2f}x",
            f"{r['reference']['loss_relative_difference']:.1e}",
            percent(r["reference"]["other_load"]),
        ]
        for r in results["reference"]
    ]
    header = (
        f"scorer|wiring|hidden|pipeline ({results['setup']['precision']}) tok/s, before / after"
        "|pipeline (fp32) tok/s|reference (fp32) tok/s|speed-up|speed-up, fp32 only"
        "|reference FLOPs / model"
        "|loss rel. difference|other load"
    )
    title = "## 3. Pipeline vs per-step reference (benchmarks/reference.py), 1 thread"
    method = (
        "Side by side: each row times the pipeline right before and right after its "
        "reference trial; the speed-up is their mean over the reference."
    )
    return [title, "", method, ""] + table(header, rows)


def bracket(pipeline: dict[str, Any]) -> str:
    """The pipeline's mean tokens/s and its trials before / after."""
    sides = (pipeline["before"]["tokens_per_s"], pipeline["after"]["tokens_per_s"])
    return f"{pipeline['tokens_per_s']:.0f} ({sides[0]:.0f} / {sides[1]:.0f})"


def decoding_section(results: dict[str, Any]) -> list[str]:
    rows = [
        [
            row["scorer"],
            row["hidden_size"],
            ("greedy" if s["beam_size"] == 1 else f"beam {s['beam_size']}")
            + f" ({s.get('precision', 'fp32')})",
            s["batch_sentences"],
            f"{s['sentences_per_s']:.1f}",
            f"{s['mean_hypothesis_tokens']:.1f} ({s['mean_reference_tokens']:.1f})",
            percent(s["share_at_length_limit"]),
            f"{row['peak_rss_mib']:.0f}",
            percent(row["other_load"]),
        ]
        for row in results["decoding"]
        for s in row["searches"]
    ]
    first = results["decoding"][0]
    models = "; ".join(f"{r['scorer']}: {r['model']}" for r in results["decoding"])
    header = (
        "scorer|hidden|search|batch|sentences/s|hyp. tokens (ref.)|at limit|peak RSS MiB|other load"
    )
    return [
        f"## 4. Decoding, 1 thread, {first['searches'][0]['sentences']} test sentences",
        "",
        f"Data: {first['data']}. Models: {models}.",
        "",
    ] + table(header, rows)


def memory_section(results: dict[str, Any]) -> list[str]:
    rows = []
    for hidden in results["setup"]["hidden_sizes"]:
        trials = [r for r in results["training"] if r["hidden_size"] == hidden]
        peak = [r["peak_rss_mib"] for r in trials]
        setup = [r["rss_setup_mib"] for r in trials]
        rows.append(
            [hidden, f"{min(peak):.0f} - {max(peak):.0f}", f"{min(setup):.0f} - {max(setup):.0f}"]
        )
    title = "## 5. Peak RSS per training trial (range over scorers and wirings)"
    return [title, ""] + table("hidden|peak RSS MiB|RSS before the first step MiB", rows)


def threads_section(results: dict[str, Any]) -> list[str]:
    threads = results["threads"]
    alone, pair = threads["alone_one_thread"], threads["pair_one_thread"]
    two = threads["one_process_two_threads"]
    rows = [
        ["1 process x 1 thread", f"{alone['tokens_per_s']:.0f}", "-", percent(alone["other_load"])],
        [
            "2 processes x 1 thread, at once",
            f"{threads['pair_tokens_per_s']:.0f}",
            " + ".join(f"{r['tokens_per_s']:.0f}" for r in pair),
            percent(pair[0]["other_load"]),
        ],
        ["1 process x 2 threads", f"{two['tokens_per_s']:.0f}", "-", percent(two["other_load"])],
    ]
    title = (
        f"## 6. Threads (additive luong h{alone['hidden_size']}, "
        f"{alone['window_seconds']:.0f} s windows)"
    )
    ratios = (
        f"2 x 1 thread / 1 x 2 threads = {threads['pair_over_two_threads']:.2f}; "
        f"2 threads / 1 thread = {two['tokens_per_s'] / alone['tokens_per_s']:.2f}; "
        f"window overlap of the pair {percent(min(r['overlap'] for r in pair))}."
    )
    return (
        [title, ""]
        + table("arrangement|target tokens/s (all)|per process|other load", rows)
        + ["", ratios]
    )


def render(results: dict[str, Any]) -> str:
    setup = results["setup"]
    lines = [
        "# Benchmarks: latest run",
        "",
        f"{setup['cpu']}, {setup['cores']} cores, torch {setup['torch']}; {setup['started']}; "
        f"whole run {duration(setup['run_seconds'])}. Training trials: "
        f"{setup['warmup_steps']} warm-up + {setup['timed_steps']} timed steps, embedding "
        f"{setup['embedding_size']}, vocabulary {setup['vocab_size']}, batch_tokens "
        f"{setup['batch_tokens']}. Other processes' load (share of all cores): "
        f"{percent(setup['other_load_at_start'])} at the start, at most "
        f"{percent(max_other_load(results))} during a trial."
        + (" QUICK MODE (tiny sizes)." if setup["quick"] else ""),
        "",
        "## Summary",
        "",
    ]
    lines += summary(results)
    for section in (
        ceiling_section,
        training_section,
        reference_section,
        decoding_section,
        memory_section,
        threads_section,
    ):
        lines += [""] + section(results)
    return "\n".join(lines) + "\n"
