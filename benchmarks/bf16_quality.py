"""How far ``--precision bf16`` lands from fp32 on real photos: PSNR of one output against the other.

Runs the Upscaler (default: the bundled model) on every image of a folder three ways: exact fp32 (math
attention, TF32 off), fp32 as ``sst upscale`` runs it (on CUDA the flash kernels attend in bf16), and
bf16. Outputs are clamped to [0, 1]; PSNR uses peak 1.0 over all RGB values. Prints one line per image
and the medians; ``--json`` keeps them.

    python benchmarks/bf16_quality.py ../shared/datasets/Set14/LR_bicubic/X4 --device cuda --json q.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import numpy as np
import torch

from sst_cli import Upscaler
from sst_cli.image_io import is_image_file, read_image

WAYS = {"exact": ("fp32", "math"), "fp32": ("fp32", "auto"), "bf16": ("bf16", "auto")}
WAYS_CPU_PADDED = {"fp32_padded": ("fp32", "sdpa")}  # --padded: also padded SDPA (auto may use sdpa-bias)


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = torch.mean((a.double() - b.double()) ** 2).item()
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


def _show(key: str, value: object) -> str:
    if not isinstance(value, float):
        return str(value)
    return f"{key} {value:.1e}" if key.startswith("fp32_max_abs") else f"{key} {value:.2f} dB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--model", default=None, help="zoo name (default: the bundled sst-light-291)")
    parser.add_argument("--scale", type=int, default=None)
    parser.add_argument("--weights", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--padded", action="store_true", help="also fp32 with every layer on padded SDPA")
    args = parser.parse_args()
    ways = dict(WAYS, **(WAYS_CPU_PADDED if args.padded else {}))
    upscalers = {
        way: Upscaler(
            args.model, args.scale, weights=args.weights, device=args.device, precision=p, attention=a, tile=0
        )
        for way, (p, a) in ways.items()
    }
    rows = []
    for path in sorted(p for p in args.folder.iterdir() if is_image_file(p)):
        color = torch.from_numpy(np.ascontiguousarray(read_image(path).color.transpose(2, 0, 1)))
        out = {way: up.run(color).image.clamp(0, 1) for way, up in upscalers.items()}
        row = {
            "image": path.name,
            "bf16_vs_fp32": psnr(out["bf16"], out["fp32"]),
            "bf16_vs_exact": psnr(out["bf16"], out["exact"]),
            "fp32_vs_exact": psnr(out["fp32"], out["exact"]),
        }
        if "fp32_padded" in out:
            row["fp32_max_abs_vs_padded"] = (out["fp32"] - out["fp32_padded"]).abs().max().item()
            row["fp32_max_abs_vs_exact"] = (out["fp32"] - out["exact"]).abs().max().item()
        rows.append(row)
        print(" ".join(_show(k, v) for k, v in row.items()), flush=True)
    medians = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "image" and "max_abs" not in k}
    minima = {k: min(r[k] for r in rows) for k in medians}
    print("median: " + ", ".join(f"{k} {v:.2f} dB" for k, v in medians.items()))
    print("min:    " + ", ".join(f"{k} {v:.2f} dB" for k, v in minima.items()))
    device = upscalers["bf16"].device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    if args.json:
        report = {"device": name, "torch": torch.__version__, "images": rows, "median": medians, "min": minima}
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
