"""Golden vectors on a device, for every attention kernel that runs there: the measured errors, as JSON.

Each golden checkpoint of ``../shared/golden`` (the authors' outputs, fp32 attention) is loaded strictly
and run on both of its inputs with each kernel, in an fp32 network (TF32 off; on CUDA the flash kernels
attend in bf16, as the authors' code does) and in a bf16 network. Prints one line per case and writes
max / mean absolute error against the golden output.

    python benchmarks/gpu_golden.py --device cuda --json gpu/golden.json [--golden DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from sst_cli import load_model
from sst_cli.archs.attention import available_backends, describe_attention
from sst_cli.runtime import fp32_mode

GOLDEN = Path(__file__).resolve().parents[2] / "shared" / "golden"
CASES = ("light_x2", "mini_x3")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--golden", type=Path, default=GOLDEN)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    device = torch.device(args.device)
    backends = [b for b in available_backends() if b != "auto"] + ["auto"]
    rows = []
    for case in CASES:
        config = json.loads((args.golden / f"{case}.json").read_text())
        io = load_file(str(args.golden / f"{case}_io.safetensors"))
        for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            model = load_model(args.golden / f"{case}.safetensors", config=config, device=device, dtype=dtype)
            for backend in backends:
                model.set_attention_backend(backend)
                kernel = describe_attention(backend, device, dtype, model.attention_head_sizes).line
                for name in ("a", "b"):
                    x = io[f"input_{name}"].to(device, dtype)
                    with torch.inference_mode(), fp32_mode(device, dtype):
                        out = model(x).float().cpu()
                    diff = (out - io[f"output_{name}"]).abs()
                    row = {
                        "case": case,
                        "input": name,
                        "precision": precision,
                        "backend": backend,
                        "kernel": kernel,
                        "max_abs": diff.max().item(),
                        "mean_abs": diff.mean().item(),
                        "finite": bool(torch.isfinite(out).all()),
                    }
                    rows.append(row)
                    print(
                        f"{case} {name} {precision:4s} {backend:10s} max|d| {row['max_abs']:.2e} "
                        f"mean|d| {row['mean_abs']:.2e}  ({kernel})",
                        flush=True,
                    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
