"""Training throughput on this machine: iterations/s and patches/s per batch size, and with runs side by side.

Each configuration runs ``sst train``'s engine (``sst_cli.train.train``) in fresh processes for
``--seconds``; the rate is the slope of iterations over the second half of the run (start-up, data loading
and cuDNN's autotuning excluded). ``--procs N`` also runs N trainings at once with the last batch size (one
per scale in a real run), to see whether one run leaves the GPU idle. On CUDA, nvidia-smi's utilisation is
sampled meanwhile.

    python benchmarks/train_probe.py --data .gpu/train291/t91 --batches 16 32 64 --procs 3 --json probe.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def worker(args: argparse.Namespace) -> None:
    from sst_cli.train import TrainConfig, train

    points: list[tuple[float, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        config = TrainConfig(
            data=(args.data,),
            out=Path(tmp) / "probe.safetensors",
            iters=10**6,
            scale=args.scale,
            batch=args.batch,
            warmup=100,
            time_limit=args.seconds,
            checkpoint_every=10**6,
            report_every=0.5,
        )
        train(config, on_progress=lambda p: points.append((time.monotonic(), p.iteration)))
    half = [p for p in points if p[0] >= points[0][0] + (points[-1][0] - points[0][0]) / 2]
    if len(half) < 2:
        raise SystemExit(f"too few progress reports in {args.seconds} s to measure a rate: give more --seconds")
    rate = (half[-1][1] - half[0][1]) / max(half[-1][0] - half[0][0], 1e-9)
    print(json.dumps({"batch": args.batch, "scale": args.scale, "its": rate, "patches": rate * args.batch}))


def run(args: argparse.Namespace, batch: int, procs: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--data", str(args.data), "--seconds", str(args.seconds)]
    cmd += ["--batch", str(batch), "--scale", str(args.scale)]
    sampler = None
    if torch.cuda.is_available():
        query = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
        sampler = subprocess.Popen([*query, "-lms", "500"], stdout=subprocess.PIPE, text=True)
    workers = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    outputs = [w.communicate()[0].strip().splitlines() for w in workers]
    if any(w.returncode or not lines for w, lines in zip(workers, outputs, strict=True)):
        raise SystemExit(f"a probe run of batch {batch} failed (its messages are above)")
    results = [json.loads(lines[-1]) for lines in outputs]
    util, memory = [], []
    if sampler is not None:
        sampler.terminate()
        for line in sampler.communicate()[0].splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and all(p.isdigit() for p in parts):
                util.append(int(parts[0]))
                memory.append(int(parts[1]))
    busy = util[len(util) // 2 :]  # the second half, as for the rates
    row = {
        "batch": batch,
        "procs": procs,
        "its_per_proc": [r["its"] for r in results],
        "patches_per_s": sum(r["patches"] for r in results),
        "gpu_util_median": statistics.median(busy) if busy else None,
        "gpu_mem_max_mib": max(memory) if memory else None,
    }
    print(
        f"batch {batch:3d} x {procs} run(s): {', '.join(f'{r:.2f}' for r in row['its_per_proc'])} it/s, "
        f"{row['patches_per_s']:.0f} patches/s, GPU util {row['gpu_util_median']}%, mem {row['gpu_mem_max_mib']} MiB",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--scale", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--procs", type=int, default=3, help="also run this many at once (last batch); 1 = skip")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=32, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    rows = [run(args, batch, 1) for batch in args.batches]
    if args.procs > 1:
        rows.append(run(args, args.batches[-1], args.procs))
    if args.json:
        device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        args.json.write_text(json.dumps({"device": device, "torch": torch.__version__, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
