"""The study in the MLflow UI: serve a store locally, and screenshot its compare view.

``python -m tools.mlflow_ui --out docs/mlflow-compare.png`` starts
``mlflow server`` on 127.0.0.1 over the project's store (infra.yaml's ``tracking.uri``),
opens the compare view of the workspace evaluation's (``eval/summary.json``) best
``test`` run per scorer in
headless Chromium (test BLEU, best dev BLEU, best epoch, still improving, ...) and saves
a screenshot. The server is stopped when it is done.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from tools.browser import chromium_page

logger = logging.getLogger(__name__)

COMPARE_METRICS = ("test_bleu", "checkpoint_dev_bleu", "peak_dev_bleu", "epochs", "still_improving")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def mlflow_server(backend_uri: str, timeout: float = 120) -> Iterator[str]:
    """Run ``mlflow server`` on 127.0.0.1 (a free port) over ``backend_uri``; yields its
    URL and stops the server (its own process group) on exit."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        backend_uri,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {process.stderr.read()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                raise TimeoutError(f"mlflow server on {url} not up after {timeout:.0f} s")
            time.sleep(0.5)
        yield url
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def rest(url: str, endpoint: str, body: dict | None = None) -> dict:
    """Call the MLflow REST API (``/api/2.0/mlflow/...``): POST ``body``, else GET."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"{url}/api/2.0/mlflow/{endpoint}",
        data=data,
        headers={"Content-Type": "application/json"},
        method="POST" if data is not None else "GET",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def search_runs(url: str, experiment_id: str, filter_string: str) -> list[dict]:
    found = rest(
        url,
        "runs/search",
        {"experiment_ids": [experiment_id], "filter": filter_string, "max_results": 1000},
    )
    return found.get("runs", [])


def newest_evaluation(
    url: str, experiment: str, eval_key: str | None = None
) -> tuple[str, dict, list[dict]]:
    """``(experiment id, evaluation run, its test runs)`` of the newest evaluation (of
    ``eval_key`` outside any DVC experiment, when given: the workspace's ``eval/``)."""
    experiment_id = rest(
        url, "experiments/get-by-name?" + urllib.parse.urlencode({"experiment_name": experiment})
    )["experiment"]["experiment_id"]
    evaluations = search_runs(url, experiment_id, "tags.kind = 'evaluation'")
    if eval_key is not None:
        evaluations = [
            r
            for r in evaluations
            if {t["key"]: t["value"] for t in r["data"].get("tags", [])}.get("eval_key") == eval_key
            and not any(t["key"] == "dvc.exp_name" for t in r["data"].get("tags", []))
        ]
    if not evaluations:
        raise LookupError(f"experiment {experiment!r} has no evaluation run yet")
    parent = max(evaluations, key=lambda r: int(r["info"]["start_time"]))
    parent_id = parent["info"]["run_id"]
    children = search_runs(url, experiment_id, f"tags.`mlflow.parentRunId` = '{parent_id}'")
    return experiment_id, parent, children


def runs_url(url: str, experiment_id: str) -> str:
    """The experiment's runs table. MLflow 3.17's UI opens in its GenAI mode (traces)
    whatever the experiment's ``mlflow.experimentKind`` tag; ``workflowType`` selects
    the "Model training" mode, which the browser then remembers."""
    return f"{url}/#/experiments/{experiment_id}?workflowType=machine_learning"


def compare_url(url: str, experiment_id: str, run_ids: list[str]) -> str:
    query = urllib.parse.urlencode(
        {"runs": json.dumps(run_ids), "experiments": json.dumps([experiment_id])}
    )
    return f"{url}/#/compare-runs?{query}&workflowType=machine_learning"


def _open(page: Any, page_url: str, wait_for: str) -> None:
    page.goto(page_url, wait_until="load", timeout=120_000)
    page.get_by_text(wait_for).first.wait_for(timeout=60_000)


def screenshot(page_url: str, out: Path, wait_for: str, width: int = 1500) -> str:
    """Open ``page_url`` in headless Chromium, wait until ``wait_for`` text shows, save a
    full-page screenshot; returns the page's visible text."""
    with chromium_page(width, 1000) as page:
        _open(page, page_url, wait_for)
        page.wait_for_timeout(1500)  # let the charts finish drawing
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), full_page=True)
        return page.inner_text("body")


def compare_screenshot(page_url: str, out: Path, width: int = 1500) -> str:
    """The compare view's run details and the top of its metrics table, in one image.

    MLflow draws the metrics table as a virtualised grid seven rows high, in name order;
    a ``test`` run's metrics are chosen so that those rows are best dev BLEU, best epoch,
    epochs, still improving and test BLEU (``TEST_RUN_SUMMARY`` in
    :mod:`pipeline.evaluate.registry`). Visualisations and parameters are collapsed, the
    assistant panel and the side bar closed; the two captures are stacked (Pillow).
    Returns the page's text.
    """
    from PIL import Image

    with chromium_page(width, 1400) as page:
        _open(page, page_url, "test_bleu")
        for button in ("Close", "Toggle sidebar"):
            page.get_by_role("button", name=button).first.click()
        for section in ("Visualizations", "Parameters"):
            page.get_by_text(section, exact=True).last.click()
        page.wait_for_timeout(800)
        sections = page.locator(".du-bois-light-collapse-item")
        details = sections.filter(has_text="Run Name:").first
        header = page.locator(".du-bois-light-collapse-header").get_by_text("Metrics", exact=True)
        metrics = sections.filter(has=header).first
        captures = [
            section.locator(".du-bois-light-collapse-content").screenshot(animations="disabled")
            for section in (details, metrics)
        ]
        text = page.inner_text("body")
    images = [Image.open(io.BytesIO(capture)) for capture in captures]
    sheet = Image.new("RGB", (max(i.width for i in images), sum(i.height for i in images)), "white")
    y = 0
    for image in images:
        sheet.paste(image, (0, y))
        y += image.height
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out)
    return text


def best_per_scorer(children: list[dict]) -> list[dict]:
    """The test run with the highest test BLEU of each scorer, best first."""

    def value(run: dict, key: str, kind: str = "metrics"):
        return next((m["value"] for m in run["data"][kind] if m["key"] == key), None)

    best: dict[str, dict] = {}
    for run in children:
        scorer = value(run, "model.scorer", "params")
        if scorer not in best or value(run, "test_bleu") > value(best[scorer], "test_bleu"):
            best[scorer] = run
    return sorted(best.values(), key=lambda r: -value(r, "test_bleu"))


def main() -> None:
    from pipeline.config.infra import load_infra
    from pipeline.records.evaluation import EvaluationSummary
    from pipeline.tracking.store import resolve_uri

    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--params", default="params.yaml")
    cli.add_argument("--infra", default=None)
    cli.add_argument("--out", type=Path, default=Path("docs/mlflow-compare.png"))
    cli.add_argument(
        "--eval",
        type=Path,
        default=Path("eval"),
        help="the evaluation to show: its summary.json's eval_key (default: eval/)",
    )
    args = cli.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    infra = load_infra(args.params, args.infra)
    key = EvaluationSummary.key_of(args.eval)
    uri = resolve_uri(infra)
    server = nullcontext(uri) if uri.startswith(("http://", "https://")) else mlflow_server(uri)
    with server as url:  # a tracking server is used as it is; a store gets a local one
        experiment_id, parent, children = newest_evaluation(url, infra.tracking.experiment, key)
        ids = [r["info"]["run_id"] for r in best_per_scorer(children)]
        text = compare_screenshot(compare_url(url, experiment_id, ids), args.out)
    logger.info(
        "%s: compare view of %d test runs of %s (%d characters of text)",
        args.out,
        len(ids),
        parent["info"]["run_name"],
        len(text),
    )


if __name__ == "__main__":
    main()
