"""GPU check of the x3 depth-wise cliff fix (sst_cli/archs/sst/depthwise.py): prints figures, asserts nothing.

1. The bare depth-wise 3x3 conv, bf16, channels-last (what SST's layer norms feed it), at SST/SST-L channel
   counts and widths around x3's 427: cuDNN as PyTorch calls it vs zero-padded to a width multiple of 8.
2. The whole network, SST-L and SST x3 bf16 at 427x240 (and x2 at 640x360 as the control), with the
   alignment on and off (``WIDTH_MULTIPLE = 1`` turns it off).

Usage (on a CUDA machine): ``python benchmarks/gpu_depthwise.py [--runs 10]``. Median ms of ``--runs`` after
3 warm-up calls, ``torch.backends.cudnn.benchmark`` off as in the measurements that found the cliff.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from sst_cli import create_model
from sst_cli.archs.sst import depthwise


def median_ms(fn: Callable[[], object], runs: int) -> float:
    with torch.inference_mode():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    return sorted(times)[runs // 2] * 1000


def bare_convs(runs: int) -> None:
    print("depth-wise 3x3, bf16, channels-last, H=240: plain cuDNN vs aligned (ms, max|diff|)")
    for channels in (180, 192, 225, 384):
        conv = torch.nn.Conv2d(channels, channels, 3, padding=1, groups=channels).cuda().bfloat16()
        for width in (424, 426, 427, 428, 430, 432, 640):
            x = torch.rand(1, channels, 240, width, device="cuda", dtype=torch.bfloat16)
            x = x.contiguous(memory_format=torch.channels_last)
            plain = median_ms(partial(F.conv2d, x, conv.weight, conv.bias, 1, 1, 1, channels), runs)
            aligned = median_ms(partial(depthwise.depthwise_aligned, x, conv), runs)
            with torch.inference_mode():
                diff = (depthwise.depthwise_aligned(x, conv) - conv(x)).abs().max().item()
            print(f"  C={channels:3d} W={width:3d}: plain {plain:7.3f}  aligned {aligned:7.3f}  "
                  f"ratio {plain / aligned:5.2f}x  max|diff| {diff:.1e}")  # fmt: skip


def networks(runs: int) -> None:
    print("whole network, bf16, depth-wise alignment off / on (ms)")
    for name, scale, w, h in (("sst-l", 3, 427, 240), ("sst", 3, 427, 240), ("sst-l", 2, 640, 360)):
        model = create_model(name, scale).eval().cuda().to(torch.bfloat16)
        x = torch.rand(1, 3, h, w, device="cuda", dtype=torch.bfloat16)
        figures = []
        for multiple in (1, 8):
            depthwise.WIDTH_MULTIPLE = multiple
            figures.append(median_ms(partial(model, x), runs))
        depthwise.WIDTH_MULTIPLE = 8
        print(f"  {name} x{scale} {w}x{h}: off {figures[0]:.1f}  on {figures[1]:.1f}  ({figures[0] / figures[1]:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_depthwise.py needs a CUDA GPU")
    torch.backends.cudnn.benchmark = False
    print(torch.cuda.get_device_name(), torch.__version__, "cuDNN", torch.backends.cudnn.version())
    bare_convs(args.runs)
    networks(args.runs)


if __name__ == "__main__":
    main()
