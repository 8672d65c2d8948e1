"""Run the baseline exploration's configurations side by side on one GPU, one process each
(run_one.py), then summarise. Everything for the way back goes under --out in at most
four files: results.tar.gz (each configuration's history.csv, progress/result json and
log; no checkpoints), summary.json, summary.md, launcher.log (this process's log).

    cd explore/baseline && PYTHONPATH=$PWD/snap:/tmp/site python3 launch.py --out $OUT \
        --train-seconds 420

A snapshot of results.tar.gz and the summary is rewritten every 60 s, so a run cut off
from outside still brings back what it had.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run_one import CONFIGS  # noqa: E402


def log(msg: str, fh) -> None:
    line = f"{time.strftime('%H:%M:%S')} {msg}"
    print(line, flush=True)
    fh.write(line + "\n")
    fh.flush()


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def summarise(work: Path, names: list[str], returncodes: dict) -> list[dict]:
    rows = []
    for name in names:
        res = read_json(work / name / "result.json") or read_json(work / name / "progress.json")
        row = {"config": name, "returncode": returncodes.get(name)}
        if res is None:
            row["status"] = "no output"
            rows.append(row)
            continue
        hist = res.get("rows", [])
        bleus = [r["dev_bleu"] for r in hist]
        row.update(
            status=res.get("status"),
            stop_reason=res.get("stop_reason") or ("killed/unfinished" if res.get("status") == "running" else None),
            steps=res.get("steps", hist[-1]["step"] if hist else 0),
            evaluations=len(hist),
            best_dev_bleu=max(bleus) if bleus else None,
            best_step=hist[bleus.index(max(bleus))]["step"] if bleus else None,
            last_dev_bleu=bleus[-1] if bleus else None,
            final_slope_per_1k=hist[-1]["slope_per_1k"] if hist else None,
            last_lr=hist[-1]["learning_rate"] if hist else None,
            best_dev_loss=min(r["dev_loss"] for r in hist) if hist else None,
            parameters=res.get("parameters"),
            wall_s=hist[-1]["elapsed_s"] if hist else None,
            error=res.get("error"),
        )
        rows.append(row)
    add = next((r for r in rows if r["config"] == "additive_h256"), None)
    ref = add.get("best_dev_bleu") if add else None
    for r in rows:
        b = r.get("best_dev_bleu")
        r["share_of_additive"] = (b / ref) if (b is not None and ref) else None
    return rows


def fmt(v, spec=".2f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec) if isinstance(v, float) else str(v)


def markdown(rows: list[dict]) -> str:
    head = ("| configuration | params (M) | updates at stop | stopped by | best dev BLEU (step) | "
            "last dev BLEU | final slope /1k | last lr | share of additive |\n")
    head += "|" + "---|" * 9 + "\n"
    for r in rows:
        head += (
            f"| {r['config']} | {fmt((r.get('parameters') or 0) / 1e6, '.1f')} | {fmt(r.get('steps'))} | "
            f"{fmt(r.get('stop_reason'))} | {fmt(r.get('best_dev_bleu'))} ({fmt(r.get('best_step'))}) | "
            f"{fmt(r.get('last_dev_bleu'))} | {fmt(r.get('final_slope_per_1k'))} | "
            f"{fmt(r.get('last_lr'), '.2g')} | {fmt(r.get('share_of_additive'), '.2f')} |\n"
        )
    return head


def write_out(out: Path, work: Path, names: list[str], returncodes: dict, extra: dict) -> list[dict]:
    rows = summarise(work, names, returncodes)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in names:
            for f in ("history.csv", "progress.json", "result.json", "config.json", "log.txt"):
                p = work / name / f
                if p.is_file():
                    tar.add(p, arcname=f"{name}/{f}")
    for fname, data in (
        ("results.tar.gz", buf.getvalue()),
        ("summary.json", (json.dumps({"rows": rows, **extra}, indent=1, default=str) + "\n").encode()),
        ("summary.md", markdown(rows).encode()),
    ):
        tmp = out / (fname + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, out / fname)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bl"))
    ap.add_argument("--train-seconds", type=float, required=True,
                    help="wall-clock deadline for training, from this launcher's start")
    ap.add_argument("--grace-seconds", type=float, default=60.0,
                    help="after the deadline: time for final evaluations before kill")
    ap.add_argument("--max-steps", type=int, default=40000)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--configs", nargs="*", default=list(CONFIGS))
    ap.add_argument("--extra-args", default="", help="passed to every run_one (tests)")
    args = ap.parse_args()
    t0 = time.time()
    deadline = t0 + args.train_seconds
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    fh = open(args.out / "launcher.log", "a")
    log(f"start; configs {args.configs}; deadline +{args.train_seconds:.0f} s", fh)
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        log(f"nvidia-smi: {smi.stdout.strip()} {smi.stderr.strip()}", fh)
    except Exception as err:  # noqa: BLE001
        log(f"nvidia-smi: {err}", fh)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    procs: dict[str, subprocess.Popen] = {}
    logs = {}
    for name in args.configs:
        (args.work / name).mkdir(parents=True, exist_ok=True)
        logs[name] = open(args.work / name / "log.txt", "w")
        cmd = [
            sys.executable, str(HERE / "run_one.py"), "--config", name,
            "--data", str(HERE / "data"), "--params", str(HERE / "snap" / "params.yaml"),
            "--out", str(args.work / name), "--device", args.device,
            "--max-steps", str(args.max_steps), "--deadline", f"{deadline:.1f}",
            *args.extra_args.split(),
        ]
        procs[name] = subprocess.Popen(cmd, stdout=logs[name], stderr=subprocess.STDOUT, env=env)
        log(f"started {name} pid {procs[name].pid}", fh)
    extra = {"train_seconds": args.train_seconds, "max_steps": args.max_steps,
             "started": t0, "configs": args.configs}
    returncodes: dict[str, int | None] = {}
    last_write, last_smi = 0.0, 0.0
    hard = deadline + args.grace_seconds
    while True:
        for name, p in procs.items():
            if name not in returncodes and p.poll() is not None:
                returncodes[name] = p.returncode
                res = read_json(args.work / name / "result.json") or {}
                log(f"{name} exited rc {p.returncode}: {res.get('stop_reason')} at "
                    f"{res.get('steps')} steps, best {res.get('best_dev_bleu')} {res.get('error', '')}", fh)
        now = time.time()
        if len(returncodes) == len(procs):
            break
        if now > hard:
            for name, p in procs.items():
                if name not in returncodes:
                    log(f"{name} (pid {p.pid}) still running past the grace period: terminating", fh)
                    p.terminate()
            time.sleep(5)
            for name, p in procs.items():
                if name not in returncodes:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                    returncodes[name] = p.returncode
            break
        if now - last_smi > 90:
            last_smi = now
            try:
                smi = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
                                      "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
                log(f"gpu util, mem: {smi.stdout.strip()}", fh)
            except Exception:  # noqa: BLE001
                pass
        if now - last_write > 60:
            last_write = now
            rows = write_out(args.out, args.work, list(procs), returncodes, extra)
            status = "; ".join(
                f"{r['config']} {r.get('steps')}:{fmt(r.get('last_dev_bleu'), '.1f')}" for r in rows
            )
            log(f"+{now - t0:.0f}s {status}", fh)
        time.sleep(2)
    extra["wall_s"] = time.time() - t0
    rows = write_out(args.out, args.work, list(procs), returncodes, extra)
    log("done in %.0f s\n%s" % (extra["wall_s"], markdown(rows)), fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
