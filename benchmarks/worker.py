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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks import workloads
from benchmarks.trials import ROOT
from pipeline.config.params import ModelConfig
from pipeline.runtime.allocator import tune_allocator
from pipeline.runtime.onednn import size_primitive_cache

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
    return ModelConfig(
        scorer=spec["scorer"],
        wiring=spec.get("wiring", "luong"),
        hidden_size=spec["hidden_size"],
        embedding_size=spec["embedding_size"],
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


def run_train_order(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec["steps"]`` steps in training's own order: params.yaml's batches and
    curriculum, epoch after epoch, each batch built when its step comes (as the trainer
    does), timed in windows of ``spec["window"]`` steps (``benchmarks.primitive_cache``)."""
    from pipeline.config import load_config
    from pipeline.data.batching import epoch_batches, make_batch
    from pipeline.data.dataset import TokenizedSplit

    split = TokenizedSplit.load(Path(spec["tok_dir"]) / "train.npz")
    train = load_config(ROOT / "params.yaml").train
    order: list = []
    epoch = 1
    while len(order) < spec["steps"]:
        order += epoch_batches(
            split,
            train.batch_tokens,
            seed=train.seed,
            epoch=epoch,
            curriculum_steps=train.curriculum_steps,
        )
        epoch += 1
    model = workloads.build_model("pipeline", model_config(spec), workloads.VOCAB_SIZE)
    optimizer = workloads.make_optimizer("pipeline", model)
    wait = barrier(spec)
    if wait is not None:
        wait()
    windows, tokens, window_start = [], 0, time.time()
    start = first = time.perf_counter()
    for step in range(spec["steps"]):
        batch = make_batch(split, order[step])
        tokens += workloads.training_step(model, optimizer, batch, spec["precision"])
        if (step + 1) % spec["window"] == 0 or step + 1 == spec["steps"]:
            now = time.perf_counter()
            windows.append({"steps": step + 1, "seconds": now - start, "tokens": tokens})
            start, tokens = now, 0
    return {
        "seconds": time.perf_counter() - first,
        "windows": windows,
        "window_start": window_start,
        "window_end": time.time(),
    }


KINDS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "matmul": run_matmul,
    "train": run_train,
    "train_order": run_train_order,
    "decode": run_decode,
}
"""Spec ``kind`` -> the function that runs it and returns its numbers."""


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    spec = json.loads(sys.argv[1])
    threads = int(spec.get("threads", 1))
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    # the pipeline's allocator settings (pipeline.runtime.allocator) for every implementation,
    # the reference included; "allocator": "default" keeps glibc's (benchmarks.allocator)
    tuned = spec.get("allocator", "tuned") == "tuned" and tune_allocator()
    size_primitive_cache()  # as training and decoding do (pipeline.runtime.onednn)
    result = KINDS[spec["kind"]](spec)
    system_seconds = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    result.update(
        threads=threads,
        peak_rss_mib=peak_rss_mib(),
        allocator_tuned=tuned,
        system_seconds=system_seconds,
    )
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
