"""Before/after crop for the README: bicubic x4 beside a model's x4 output, on a region of a real photo.

    PYTHONPATH=. python3 examples/before_after.py --weights SSTReal_X4.pth --image examples/rocket.jpg \
        --box 120,60,64,48 --out examples/sst_real_before_after.png

``--box X,Y,W,H`` is the LR region (pixels of the input photo); the network sees that region plus 16 pixels
of context on every side, then the crop is cut out, so the borders look as they do in a whole-image run.
Any model works (``--model sst-l+`` for a bicubic-trained SST beside it); ``--ig-lambda`` / ``--seed`` pass
through to sst-real; ``--device`` as in ``sst upscale`` (auto: a GPU when there is one). The right half is
labelled with the model name.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from PIL import Image, ImageDraw

from sst_cli import UpscaleOptions, Upscaler
from sst_cli.errors import SstError

CONTEXT = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", type=Path, default=Path("examples/rocket.jpg"))
    parser.add_argument("--box", default="120,60,64,48", help="X,Y,W,H of the LR region")
    parser.add_argument("--model", default="sst-real")
    parser.add_argument("--weights", default=None, help="weights file (sst-real: the checkpoint from the hub)")
    parser.add_argument("--ig-lambda", type=float, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N (as sst upscale --device)")
    parser.add_argument("--out", type=Path, default=Path("before_after.png"))
    args = parser.parse_args()
    try:
        draw_before_after(args)
    except (SstError, OSError) as exc:  # one line, as the sst command says it
        raise SystemExit(f"error: {exc}") from None


def draw_before_after(args: argparse.Namespace) -> None:
    photo = Image.open(args.image).convert("RGB")
    try:
        x, y, w, h = (int(v) for v in args.box.split(","))
    except ValueError:
        raise SystemExit(f"error: --box is X,Y,W,H in pixels, got {args.box!r}") from None
    if min(x, y) < 0 or min(w, h) < 1 or x + w > photo.width or y + h > photo.height:
        raise SystemExit(f"error: --box {args.box} does not lie inside {args.image} ({photo.width}x{photo.height})")
    left, top = max(0, x - CONTEXT), max(0, y - CONTEXT)
    region = photo.crop((left, top, min(photo.width, x + w + CONTEXT), min(photo.height, y + h + CONTEXT)))
    options = UpscaleOptions(device=args.device, ig_lambda=args.ig_lambda, seed=args.seed)
    upscaler = Upscaler(args.model if args.weights is None else None, weights=args.weights, options=options)
    s = upscaler.scale
    inner = ((x - left) * s, (y - top) * s, (x - left + w) * s, (y - top + h) * s)
    after = upscaler.upscale(region).crop(inner)
    before = region.resize((region.width * s, region.height * s), Image.BICUBIC).crop(inner)
    canvas = Image.new("RGB", (2 * w * s + 8, h * s), "white")
    canvas.paste(before, (0, 0))
    canvas.paste(after, (w * s + 8, 0))
    label = args.model if args.weights is None else Path(args.weights).name
    draw = ImageDraw.Draw(canvas)
    draw.text((4, 4), "bicubic", fill="yellow")
    draw.text((w * s + 12, 4), label, fill="yellow")
    canvas.save(args.out)
    print(f"{args.out}: {args.image.name} region {args.box}, bicubic (left) vs {label} x{s} (right)")


if __name__ == "__main__":
    main()
