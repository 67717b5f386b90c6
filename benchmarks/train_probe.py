"""Training throughput on this machine: patches/s per batch size, precision and torch.compile, side by side.

Each configuration runs ``sst train``'s engine (``sst_cli.train.train``) in a fresh process for ``--seconds``
of training; the rate is the slope of iterations over the second half of the progress reports (start-up,
data upload, cuDNN autotuning and compilation excluded; ``startup_s`` says how long they took until the
first step). On CUDA, ``host_syncs_per_step`` counts, over that half, the operations that made the host
wait for the GPU (``torch.cuda.set_sync_debug_mode``): the loss read alone gives 1 / ``--report-every``.
A row ``data`` times the patch sampler alone (crop, flip, bicubic LR on the device), so one
sees whether the data can keep up. ``--procs N`` also runs N trainings at once (last batch, first
variant). On CUDA, nvidia-smi's utilisation and memory are sampled meanwhile.

One GPU call (issue 29's figure: >= 700 patches/s for SST-light x4, 64 px LR patches, on an H100):

    python benchmarks/train_probe.py --data /tmp/sst/train291 --batches 32 64 \\
        --variants bf16 fp32 --json probe.json                     # about 5 minutes
    python benchmarks/train_probe.py --data /tmp/sst/train291 --batches 64 \\
        --variants bf16+compile --seconds 240 --json compile.json  # compiling forward + backward takes minutes

(/tmp/sst/train291: ``benchmarks/gpu_stage.py train`` + ``benchmarks/gpu_prelude.sh``, as for training.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

VARIANTS = ("bf16", "fp32", "bf16+compile", "fp32+compile")


def _cuda_sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def data_rate(args: argparse.Namespace) -> dict[str, Any]:
    """Patches/s of the sampler alone, on the device training would use (one sync at the end of each timing)."""
    from sst_cli.runtime import resolve_device
    from sst_cli.trainset import PatchSampler, find_images, load_images

    device = resolve_device("auto")
    size = args.patch * args.scale
    started = time.monotonic()
    sampler = PatchSampler(load_images(find_images([args.data]), size), args.patch, args.scale, 0, device)
    _cuda_sync()
    upload = time.monotonic() - started
    batch = args.batches[-1]
    for _ in range(3):
        sampler.sample(batch)
    _cuda_sync()
    count, began = 0, time.monotonic()
    while time.monotonic() - began < 3.0:
        sampler.sample(batch)
        count += 1
    _cuda_sync()
    seconds = time.monotonic() - began
    mib = sampler.pixels.numel() / 2**20
    row = {"variant": "data", "batch": batch, "patches_per_s": count * batch / seconds, "resident_mib": mib}
    row["load_and_upload_s"] = upload
    print(json.dumps({**row, "device": str(device)}))
    return row


def _data_row(args: argparse.Namespace) -> dict[str, Any]:
    """``data_rate`` in its own process, so this one never holds GPU memory while the trainings run."""
    cmd = [sys.executable, __file__, "--worker", "--variant", "data", "--data", str(args.data)]
    cmd += ["--scale", str(args.scale), "--patch", str(args.patch), "--batches", *map(str, args.batches)]
    lines = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True).stdout.strip().splitlines()
    row = json.loads(lines[-1])
    print(
        f"data only, batch {row['batch']}: {row['patches_per_s']:.0f} patches/s; images resident on "
        f"{row.pop('device')}: {row['resident_mib']:.0f} MiB (read + upload {row['load_and_upload_s']:.1f} s)",
        flush=True,
    )
    return row


def worker(args: argparse.Namespace) -> None:
    from sst_cli.train import TrainConfig, train

    precision, _, compiled = args.variant.partition("+")
    points: list[tuple[float, int, int]] = []  # (time, iteration, host syncs so far)
    cuda = torch.cuda.is_available()
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        config = TrainConfig(
            data=(args.data,),
            out=Path(tmp) / "probe.safetensors",
            iters=10**6,
            scale=args.scale,
            patch=args.patch,
            batch=args.batch,
            warmup=100,
            time_limit=args.seconds,
            checkpoint_every=10**6,
            report_every=args.report_every,
            precision=precision,
            compile=compiled == "compile",
        )
        # CUDA's sync debug mode warns at every operation that makes the host wait for the GPU: counted.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if cuda:
                torch.cuda.set_sync_debug_mode("warn")

            def progress(p: Any) -> None:
                syncs = sum("synchroniz" in str(w.message) for w in caught)
                points.append((time.monotonic(), p.iteration, syncs))

            train(config, on_progress=progress)
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
    half = [p for p in points if p[0] >= points[0][0] + (points[-1][0] - points[0][0]) / 2]
    if len(half) < 2:
        raise SystemExit(f"too few progress reports in {args.seconds} s to measure a rate: more --seconds")
    steps = max(half[-1][1] - half[0][1], 1)
    rate = steps / max(half[-1][0] - half[0][0], 1e-9)
    syncs = (half[-1][2] - half[0][2]) / steps if cuda else None  # expected: 1 / --report-every
    memory = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
    row = {"its": rate, "patches": rate * args.batch, "startup_s": points[0][0] - began, "mib": memory}
    print(json.dumps({**row, "syncs_per_step": syncs}))


def run(args: argparse.Namespace, variant: str, batch: int, procs: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", "--data", str(args.data), "--seconds", str(args.seconds)]
    cmd += ["--batch", str(batch), "--scale", str(args.scale), "--patch", str(args.patch), "--variant", variant]
    cmd += ["--report-every", str(args.report_every)]
    sampler = None
    cuda = torch.cuda.is_available()
    if cuda:
        query = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
        sampler = subprocess.Popen([*query, "-lms", "500"], stdout=subprocess.PIPE, text=True)
    workers = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    outputs = [w.communicate()[0].strip().splitlines() for w in workers]
    util, memory = [], []
    if sampler is not None:
        sampler.terminate()
        for line in sampler.communicate()[0].splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and all(p.isdigit() for p in parts):
                util.append(int(parts[0]))
                memory.append(int(parts[1]))
    if any(w.returncode or not lines for w, lines in zip(workers, outputs, strict=True)):
        print(f"{variant} batch {batch}: a probe run failed (its messages are above)", flush=True)
        return {"variant": variant, "batch": batch, "procs": procs, "failed": True}
    results = [json.loads(lines[-1]) for lines in outputs]
    busy = util[len(util) // 2 :]  # the second half, as for the rates
    row = {
        "variant": variant,
        "batch": batch,
        "procs": procs,
        "its_per_proc": [r["its"] for r in results],
        "patches_per_s": sum(r["patches"] for r in results),
        "startup_s": max(r["startup_s"] for r in results),
        "host_syncs_per_step": max((r["syncs_per_step"] or 0) for r in results) if cuda else None,
        "torch_max_alloc_mib": max((r["mib"] or 0) for r in results) or None,
        "gpu_util_median": statistics.median(busy) if busy else None,
        "gpu_mem_max_mib": max(memory) if memory else None,
    }
    print(
        f"{variant:>13} batch {batch:3d} x {procs} run(s): {', '.join(f'{r:.2f}' for r in row['its_per_proc'])} it/s, "
        f"{row['patches_per_s']:.0f} patches/s (start-up {row['startup_s']:.0f} s), "
        f"host syncs per step {row['host_syncs_per_step']}, "
        f"GPU util {row['gpu_util_median']}%, "
        f"mem {row['gpu_mem_max_mib']} MiB",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--scale", type=int, default=4)
    parser.add_argument("--patch", type=int, default=64, help="LR patch side (HR = patch x scale)")
    parser.add_argument("--seconds", type=float, default=40.0, help="training seconds per run (after start-up)")
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=["bf16", "fp32"])
    parser.add_argument("--report-every", type=int, default=20, help="steps between loss reads (host syncs)")
    parser.add_argument("--procs", type=int, default=1, help="also run this many at once (last batch); 1 = skip")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=32, help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="bf16", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        data_rate(args) if args.variant == "data" else worker(args)
        return
    rows = [_data_row(args)]
    rows += [run(args, variant, batch, 1) for variant in args.variants for batch in args.batches]
    if args.procs > 1:
        rows.append(run(args, args.variants[0], args.batches[-1], args.procs))
    if args.json:
        device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        meta = {"device": device, "torch": torch.__version__, "scale": args.scale, "patch": args.patch}
        args.json.write_text(json.dumps({**meta, "seconds": args.seconds, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
