"""Stand-in for HAT's official ``HAT_SRx4.pth``, which no machine of this project can download (issue 27).

Writes a checkpoint of random weights with HAT_SRx4's hyperparameters (HAT's ``options/test/HAT_SRx4.yml``) in
HAT's ``params_ema`` wrapper, then checks that sst-cli's whole-image output equals spandrel's own call on one
picture. With the file written, ``sst eval --weights FILE -d Set5 -d Set14`` runs the published protocol on it.
Needs the spandrel extra::

    python benchmarks/hat_x4_shape.py /tmp/HAT_SRx4_random.pth --image ../shared/datasets/Set5/LR_bicubic/X3/birdx3.png
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image


def write_checkpoint(path: Path) -> int:
    """The file, with weights scaled so that the random network's output is not flat; returns its parameters."""
    from spandrel.architectures.HAT.__arch.HAT import HAT

    torch.manual_seed(0)
    model = HAT(
        upscale=4, in_chans=3, img_size=64, window_size=16, compress_ratio=3, squeeze_factor=30, conv_scale=0.01,
        overlap_ratio=0.5, img_range=1.0, depths=[6] * 6, embed_dim=180, num_heads=[6] * 6, mlp_ratio=2,
        upsampler="pixelshuffle", resi_connection="1conv",
    )  # fmt: skip
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.add_(torch.randn_like(p) * 0.5 / math.sqrt(p[0].numel()))
    torch.save({"params_ema": model.state_dict()}, path)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="where to write the checkpoint")
    parser.add_argument("--image", type=Path, required=True, help="an RGB picture to compare the two calls on")
    args = parser.parse_args()

    import spandrel

    from sst_cli import Upscaler

    print(f"{args.out}: {write_checkpoint(args.out):,} parameters")
    rgb = np.array(Image.open(args.image).convert("RGB"), dtype=np.float32) / 255
    image = torch.from_numpy(rgb).permute(2, 0, 1)
    descriptor = spandrel.ModelLoader().load_from_file(args.out).eval()
    print(f"spandrel: {descriptor.architecture.name} x{descriptor.scale}, tags {', '.join(descriptor.tags)}")
    start = time.perf_counter()
    theirs = descriptor(image[None])[0]
    print(f"spandrel's call: {time.perf_counter() - start:.1f} s")
    upscaler = Upscaler(weights=args.out, device="cpu", precision="fp32", tile=0)
    start = time.perf_counter()
    ours = upscaler.run(image).image.clamp(0, 1)
    print(f"sst-cli, whole image: {time.perf_counter() - start:.1f} s")
    differ = float((ours - theirs).abs().max())
    print(f"{tuple(ours.shape)}: {'the same pixels' if torch.equal(ours, theirs) else f'max difference {differ:.3g}'}")


if __name__ == "__main__":
    main()
