"""One benchmark trial in a fresh process: ``python -m benchmarks.worker '<spec json>'``.

A fresh interpreter per trial gives each trial its own thread count, its own allocator
state and its own peak RSS (``getrusage(RUSAGE_SELF).ru_maxrss``, what the parent's
``RUSAGE_CHILDREN`` would report for this child alone). The spec's ``kind`` is
``matmul``, ``train`` or ``decode`` (see :data:`KINDS`).

Protocol on stdout: with ``"wait": true`` the worker prints ``READY`` after its warm-up
and blocks until a line arrives on stdin (so that concurrent trials time the same
seconds); it ends with one line ``RESULT <json>``. Logs go to stderr.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks import workloads
from pipeline.config.params import ModelConfig
from pipeline.runtime.process import prepare_process

logger = logging.getLogger("benchmarks.worker")


def current_rss_mib() -> float:
    """Resident set size now (``VmRSS`` of ``/proc/self/status``), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def barrier(spec: dict[str, Any]) -> Callable[[], None] | None:
    """Signal READY and wait for the parent's go line (only with ``wait``)."""
    if not spec.get("wait"):
        return None

    def wait() -> None:
        print("READY", flush=True)
        sys.stdin.readline()

    return wait


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """The benchmark's model: GRU cells (the per-step reference's), dropout 0.2."""
    return ModelConfig(
        scorer=spec["scorer"],
        wiring=spec.get("wiring", "luong"),
        hidden_size=spec["hidden_size"],
        embedding_size=spec["embedding_size"],
        cell="gru",
        dropout=0.2,
    )


def run_matmul(spec: dict[str, Any]) -> dict[str, Any]:
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[spec.get("dtype", "fp32")]
    return workloads.time_matmul(spec["size"], spec["seconds"], barrier(spec), dtype)


def run_train(spec: dict[str, Any]) -> dict[str, Any]:
    config = model_config(spec)
    split, source = workloads.load_split(spec["tok_dir"], "train")
    count = spec["warmup"] + spec["steps"]
    batches = workloads.sample_batches(split, spec["batch_tokens"], count, spec["seed"])
    model = workloads.build_model(spec["implementation"], config, workloads.VOCAB_SIZE)
    result: dict[str, Any] = {
        "data": source,
        "parameters": sum(p.numel() for p in model.parameters()),
        **workloads.batch_statistics(batches[spec["warmup"] :]),
    }
    if spec.get("check"):
        result["loss_relative_difference"] = workloads.loss_agreement(
            config, workloads.VOCAB_SIZE, batches[0]
        )
    result["rss_setup_mib"] = current_rss_mib()
    result.update(
        workloads.time_training(
            model,
            config,
            batches,
            warmup=spec["warmup"],
            steps=spec["steps"],
            implementation=spec["implementation"],
            precision=spec.get("precision", "fp32"),
            window_seconds=spec.get("window_seconds", 0.0),
            before_timing=barrier(spec),
        )
    )
    return result


def run_decode(spec: dict[str, Any]) -> dict[str, Any]:
    config = model_config(spec)
    split, source = workloads.load_split(spec["tok_dir"], "test")
    rng = np.random.default_rng(spec["seed"])
    count = min(spec["sentences"], len(split))
    split = split.subset(np.sort(rng.choice(len(split), count, replace=False)))
    model, trained = load_trained(spec, config)
    result: dict[str, Any] = {"data": source, "model": trained, "rss_setup_mib": current_rss_mib()}
    precision = spec.get("precision", "fp32")
    result["searches"] = [
        workloads.time_decoding(model, split, k, precision) for k in spec["beam_sizes"]
    ]
    return result


def load_trained(spec: dict[str, Any], config: ModelConfig):
    """The trained checkpoint ``spec['checkpoint']`` if it loads, else an untrained model
    (which rarely emits EOS, so it decodes to the length limit: a worst case)."""
    path = spec.get("checkpoint")
    if path and Path(path).is_file():
        from pipeline.data.dataset import TokenizedData
        from pipeline.models.checkpoint import VocabInfo, load_checkpoint

        try:
            vocab = VocabInfo.from_data(TokenizedData.load(Path(spec["tok_dir"])))
            model = load_checkpoint(path, expected_vocab=vocab).model
            return model, f"trained ({os.path.relpath(path)})"
        except (OSError, ValueError) as error:
            logger.warning("%s: not usable (%s); decoding with an untrained model", path, error)
    model = workloads.build_model("pipeline", config, workloads.VOCAB_SIZE).eval()
    return model, "untrained (random weights; no checkpoint)"


KINDS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "matmul": run_matmul,
    "train": run_train,
    "decode": run_decode,
}
"""Spec ``kind`` -> the function that runs it and returns its numbers."""


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    spec = json.loads(sys.argv[1])
    threads = int(spec.get("threads", 1))
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    settings = prepare_process()  # as a training trial, the reference's workers included
    result = KINDS[spec["kind"]](spec)
    result.update(threads=threads, peak_rss_mib=peak_rss_mib(), **settings)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
