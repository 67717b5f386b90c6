#!/usr/bin/env python3
"""``--compile``: what compiling costs and what it gains, in a first and a second process sharing one cache.

Runs itself twice as a child (``--child``) with ``TORCHINDUCTOR_CACHE_DIR`` pointing at one folder, empty
before the first (or ``--cache DIR``, kept). Each child builds the model with seeded random weights, makes an
``Upscaler(..., compile="on")`` (the path of ``sst upscale --compile on``), and measures on one input:

* ``compile_s``: the first compiled call (tracing + inductor; the second process should hit the cache);
* ``eager_ms`` / ``compiled_ms``: median forward time of the eager and the compiled network (after warm-up);
* ``max_abs_diff``: compiled against eager output;
* with ``--tile N``: a whole ``Upscaler.run`` of the image in N px tiles instead (on CUDA: CUDA graphs);
* ``graphs``: graphs dynamo compiled in the process.

``--variants regions whole`` does it for each way of compiling, each with its own empty cache: ``regions``
(what sst-cli does: the network's repeated blocks one by one, blocks alike sharing a graph) and ``whole``
(one graph of the whole network, sst-cli's way before 2026-11-27).

Issue 25's GPU goals (H100/H200, Table S4 protocol): SST-L x2 bf16 1280x720 output ``compiled_ms <= 120``, the
second process's ``compile_s <= 30``. Pending a GPU machine:

    PYTHONPATH=. python benchmarks/bench_compile.py --device cuda --model sst-l --scale 2 --size 1280x720 \\
        --precision bf16 --json benchmarks/gpu/compile-<gpu>-<date>.json
    PYTHONPATH=. python benchmarks/bench_compile.py --device cpu --model sst-light --scale 4 --size 256x256
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import torch


def _time(fn: Callable[[], object], device: torch.device, runs: int, warmup: int) -> float:
    from sst_cli.runtime import synchronize

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        synchronize(device)
        started = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def child(args: argparse.Namespace) -> dict:
    from torch._dynamo.utils import counters

    from sst_cli import Upscaler, create_model
    from sst_cli.runtime import fp32_mode, resolve_device

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = resolve_device(args.device)
    width, height = (int(v) for v in args.size.lower().split("x"))
    lr = (-(-height // args.scale), -(-width // args.scale))
    messages: list[str] = []
    model = create_model(args.model, args.scale)
    if args.variant == "whole":
        model.repeated_block = None  # no regions: compile_network wraps the whole network
    tile = args.tile or 0
    up = Upscaler(model, device=str(device), precision=args.precision, tile=tile, compile="on")
    up.on_message = messages.append
    assert up.compiled is not None
    image = torch.rand(3, *lr)
    # Eager first: compiling by regions compiles the model's own blocks in place, so that afterwards
    # ``model`` runs compiled too.
    if tile:
        eager = Upscaler(model, device=str(device), precision=args.precision, tile=tile, compile="off")
        eager_out = eager.run(image).image
        eager_ms = _time(lambda: eager.run(image), device, args.runs, 1)
        started = time.perf_counter()
        compiled_out = up.run(image).image
        first = time.perf_counter() - started
        compiled_ms = _time(lambda: up.run(image), device, args.runs, 1)
    else:
        x = image[None].to(device, up.dtype)
        with torch.inference_mode(), fp32_mode(device, up.dtype):
            eager_out = up.model(x).float().cpu()
            eager_ms = _time(lambda: up.model(x), device, args.runs, args.warmup)
            started = time.perf_counter()
            compiled_out = up.compiled(x).float().cpu()
            first = time.perf_counter() - started
            compiled_ms = _time(lambda: up.compiled(x), device, args.runs, args.warmup)  # type: ignore[misc]
    return {
        "compiled": not up.compiled.eager,
        "compile_s": up.compiled.compile_seconds,
        "first_call_s": first,
        "eager_ms": eager_ms,
        "compiled_ms": compiled_ms,
        "max_abs_diff": (compiled_out - eager_out).abs().max().item(),
        "graphs": int(counters["stats"]["unique_graphs"]),
        "messages": messages,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="sst-l")
    parser.add_argument("--scale", type=int, default=2)
    parser.add_argument("--size", default="1280x720", help="output WxH (LR = ceil(W/s) x ceil(H/s))")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--tile", type=int, default=0, help="time a tiled Upscaler.run instead of one forward")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--cache", help="inductor cache folder (default: a fresh temporary one per variant)")
    parser.add_argument("--variants", nargs="+", choices=("regions", "whole"), default=["regions"])
    parser.add_argument("--variant", default="regions", help=argparse.SUPPRESS)  # the child's
    parser.add_argument("--json", help="write both processes' figures here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)), flush=True)
        return
    rows = []
    for variant in args.variants:
        cache = tempfile.mkdtemp(prefix="sst-compile-") if args.cache is None else f"{args.cache}/{variant}"
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        for process in ("first", "second"):
            command = [sys.executable, __file__, *sys.argv[1:], "--child", "--variant", variant]
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.exit(f"{variant}, {process} process failed:\n{done.stderr[-4000:]}")
            rows.append({"variant": variant, "process": process, **json.loads(done.stdout.strip().splitlines()[-1])})
    what = f"{args.model} x{args.scale} {args.precision} {args.size} output" + (
        f", {args.tile} px tiles" if args.tile else ""
    )
    print(f"{what} on {args.device}, torch {torch.__version__}")
    header = ("variant", "process", "compiled", "compile s", "graphs", "eager ms", "compiled ms", "speed-up")
    header += ("max diff",)
    print(f"{header[0]:8} {header[1]:8} " + " ".join(f"{h:>11}" for h in header[2:]))
    for r in rows:
        print(
            f"{r['variant']:8} {r['process']:8} {r['compiled']!s:>11} {r['compile_s']:11.1f} {r['graphs']:11d} "
            f"{r['eager_ms']:11.1f} {r['compiled_ms']:11.1f} {r['eager_ms'] / r['compiled_ms']:11.2f} "
            f"{r['max_abs_diff']:11.2e}"
        )
    for note in rows[0]["messages"]:
        print(f"  {note}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"settings": vars(args), "torch": torch.__version__, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
