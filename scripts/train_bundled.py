#!/usr/bin/env python3
"""Train the bundled demo weights ``weights/sst-light_x4.safetensors`` on a CPU.

The official SST checkpoints live on the Hugging Face hub, which an offline machine cannot reach.
So that ``sst`` works out of the box, this script trains the smallest official architecture,
``sst-light`` at x4, from scratch within a fixed wall-clock budget and saves the EMA of its weights
as safetensors with metadata that says plainly what they are: demo weights, far below the
published SST-light results.

Training data: ONLY the 291 images of ``train291`` (T91 + BSD200 train). Set5, Set14 and B100 are
evaluation sets and are never read for training; Set5 is used at the end for a PSNR-Y report.

Pairs are made on the fly: a random HR crop with a random flip / 90-degree rotation, and its LR is
the bicubic x4 downscale with antialiasing (MATLAB-like ``imresize``), rounded to 8 bits.

To save CPU time, the first ``--small-frac`` of the budget may train with every attention window
divided by ``--small-div`` on smaller crops (RIB positional factors are an implicit function of
the in-window coordinate, so no parameter shape depends on the window size); the rest trains with
the official windows, which are also the ones the saved weights are evaluated and used with.

Reproduce the bundled file (numbers in weights/TRAINING.md):

    python3 scripts/train_bundled.py --minutes 56 --small-frac 0.8 --seed 0 --out weights/sst-light_x4.safetensors
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import load_file, save_file
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sst_cli.model import SST
from sst_cli.model.layers import WindowAttention
from sst_cli.zoo import create_model

VARIANT = "sst-light"
SCALE = 4
DATA = Path("/work/shared/datasets/train291")
SET5 = Path("/work/shared/datasets/Set5")
CHECKPOINT = Path("/tmp/sst-light_x4_train.pt")
CHECKPOINT_EVERY_S = 600.0
SET5_NAMES = ("baby", "bird", "butterfly", "head", "woman")


# ----------------------------------------------------------------------------- data


def load_images(root: Path) -> list[np.ndarray]:
    """Every PNG under ``root/t91`` and ``root/bsd200`` as an HxWx3 uint8 array, loaded once."""
    files = sorted((root / "t91").glob("*.png")) + sorted((root / "bsd200").glob("*.png"))
    if not files:
        raise SystemExit(f"no training images under {root}/t91 or {root}/bsd200")
    return [np.asarray(Image.open(f).convert("RGB"), dtype=np.uint8) for f in files]


def random_crop(img: np.ndarray, size: int, rng: random.Random) -> np.ndarray:
    """A ``size`` x ``size`` crop with a random flip and 90-degree rotation."""
    h, w = img.shape[:2]
    top, left = rng.randrange(h - size + 1), rng.randrange(w - size + 1)
    crop = img[top : top + size, left : left + size]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    return np.rot90(crop, rng.randrange(4))


def bicubic_down(hr: torch.Tensor, scale: int) -> torch.Tensor:
    """MATLAB-like bicubic downscale (antialiased) of NCHW floats in [0, 255], rounded to 8 bits."""
    h, w = hr.shape[-2:]
    lr = F.interpolate(hr, size=(h // scale, w // scale), mode="bicubic", antialias=True, align_corners=False)
    return lr.round().clamp(0, 255)


def make_batch(
    images: list[np.ndarray], batch: int, patch: int, rng: random.Random
) -> tuple[torch.Tensor, torch.Tensor]:
    """(LR, HR) in [0, 1]: ``batch`` random HR crops of ``patch`` px and their x4 bicubic LR."""
    crops = [random_crop(rng.choice(images), patch, rng) for _ in range(batch)]
    hr = torch.from_numpy(np.stack(crops)).permute(0, 3, 1, 2).float()
    return bicubic_down(hr, SCALE) / 255.0, hr / 255.0


# ----------------------------------------------------------------------------- model helpers


def set_window_divisor(model: nn.Module, official: tuple[int, ...], div: int) -> None:
    """Run every attention layer with its official window size divided by ``div`` (1 = official)."""
    layers = [m for m in model.modules() if isinstance(m, WindowAttention)]
    for i, layer in enumerate(layers):
        layer.window = max(1, official[i % len(official)] // div)


@torch.no_grad()
def ema_update(ema: nn.Module, model: nn.Module, decay: float) -> None:
    for e, p in zip(ema.state_dict().values(), model.state_dict().values(), strict=True):
        if e.dtype.is_floating_point:
            e.lerp_(p, 1.0 - decay)
        else:
            e.copy_(p)


def learning_rate(base: float, step: int, progress: float, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to 2% of ``base`` at ``progress`` 1."""
    ramp = min(1.0, (step + 1) / warmup)
    return base * ramp * (0.02 + 0.98 * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))))


# ----------------------------------------------------------------------------- evaluation


def rgb_to_y(img: np.ndarray) -> np.ndarray:
    """BT.601 luma of uint8 RGB, in [16, 235] (float, not rounded)."""
    rgb = img.astype(np.float64) / 255.0
    return 16.0 + 65.481 * rgb[..., 0] + 128.553 * rgb[..., 1] + 24.966 * rgb[..., 2]


def psnr_y(sr: np.ndarray, hr: np.ndarray, shave: int) -> float:
    diff = rgb_to_y(sr)[shave:-shave, shave:-shave] - rgb_to_y(hr)[shave:-shave, shave:-shave]
    return float(10.0 * np.log10(255.0**2 / np.mean(diff**2)))


@torch.no_grad()
def upscale(model: SST, lr: np.ndarray) -> np.ndarray:
    x = torch.from_numpy(lr.copy()).permute(2, 0, 1)[None].float() / 255.0
    y = model(x).clamp(0, 1)[0].permute(1, 2, 0)
    return (y * 255.0).round().to(torch.uint8).numpy()


def evaluate_set5(model: SST, root: Path) -> dict[str, tuple[float, float]]:
    """Per image: (PSNR-Y of ``model``, PSNR-Y of PIL bicubic), x4, 4-pixel border shaved."""
    model.eval()
    results: dict[str, tuple[float, float]] = {}
    for name in SET5_NAMES:
        lr_img = Image.open(root / "LR_bicubic" / f"X{SCALE}" / f"{name}x{SCALE}.png").convert("RGB")
        w, h = lr_img.size
        hr = np.asarray(Image.open(root / "HR" / f"{name}.png").convert("RGB"))[: h * SCALE, : w * SCALE]
        bicubic = np.asarray(lr_img.resize((w * SCALE, h * SCALE), Image.BICUBIC))
        sr = upscale(model, np.asarray(lr_img))
        results[name] = (psnr_y(sr, hr, SCALE), psnr_y(bicubic, hr, SCALE))
    return results


def report_set5(model: SST, root: Path) -> tuple[float, float]:
    results = evaluate_set5(model, root)
    for name, (ours, bic) in results.items():
        print(f"  {name:10s} model {ours:6.2f} dB   PIL bicubic {bic:6.2f} dB")
    mean_ours = float(np.mean([r[0] for r in results.values()]))
    mean_bic = float(np.mean([r[1] for r in results.values()]))
    print(f"  Set5 x{SCALE} mean PSNR-Y: model {mean_ours:.2f} dB, PIL bicubic {mean_bic:.2f} dB", flush=True)
    return mean_ours, mean_bic


def load_weights(path: Path) -> SST:
    model = create_model(VARIANT, SCALE)
    model.load_state_dict(load_file(str(path)))
    return model


# ----------------------------------------------------------------------------- training


@dataclass
class State:
    step: int = 0
    elapsed: float = 0.0
    loss_avg: float = float("nan")


def save_checkpoint(model: nn.Module, ema: nn.Module, opt: torch.optim.Optimizer, state: State) -> None:
    tmp = CHECKPOINT.with_suffix(".tmp")
    payload = {"model": model.state_dict(), "ema": ema.state_dict(), "opt": opt.state_dict()}
    torch.save({**payload, "step": state.step, "elapsed": state.elapsed, "loss_avg": state.loss_avg}, tmp)
    tmp.replace(CHECKPOINT)


def save_weights(ema: SST, path: Path, steps: int) -> None:
    state = {k: v.detach().float().contiguous() for k, v in ema.state_dict().items()}
    metadata = {
        "sst_config": json.dumps(create_model(VARIANT, SCALE).config.to_kwargs()),
        "variant": VARIANT,
        "scale": str(SCALE),
        "source": (
            f"sst-cli demo weights trained on train291 (T91 + BSD200) on CPU for {steps} steps; "
            "not the official SST-light weights"
        ),
        "steps": str(steps),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path), metadata=metadata)


def train(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    t_load = time.time()
    images = load_images(args.data)
    print(f"loaded {len(images)} images in {time.time() - t_load:.1f}s", flush=True)
    pools = {p: [im for im in images if min(im.shape[:2]) >= p] for p in {args.patch, args.small_patch}}
    for p, pool in pools.items():
        print(f"  {len(pool)} images are at least {p}px on each side", flush=True)

    model = create_model(VARIANT, SCALE)
    with torch.no_grad():  # start close to the nearest-neighbour skip the upsampler adds
        model.upsampler.up_conv.weight.mul_(0.1)
        model.upsampler.up_conv.bias.zero_()
    ema = copy.deepcopy(model).requires_grad_(False)
    official = model.config.window_sizes
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.99), weight_decay=1e-4)
    state = State()
    if args.resume:
        ckpt = torch.load(args.resume, map_location="cpu")
        model.load_state_dict(ckpt["model"])
        ema.load_state_dict(ckpt["ema"])
        opt.load_state_dict(ckpt["opt"])
        state = State(ckpt["step"], ckpt["elapsed"], ckpt["loss_avg"])
        print(f"resumed at step {state.step}, {state.elapsed / 60:.1f} min", flush=True)

    budget = args.minutes * 60.0
    start = time.time() - state.elapsed
    last_ckpt = time.time()
    current_div = 0
    model.train()
    while True:
        state.elapsed = time.time() - start
        progress = state.step / args.steps if args.steps else state.elapsed / budget
        if progress >= 1.0 or state.elapsed >= budget:
            break
        small = progress < args.small_frac
        div, patch, batch = (
            (args.small_div, args.small_patch, args.small_batch) if small else (1, args.patch, args.batch)
        )
        if div != current_div:
            print(f"step {state.step}: windows / {div}, HR patch {patch}, batch {batch}", flush=True)
            current_div = div
        set_window_divisor(model, official, div)

        lr_img, hr_img = make_batch(pools[patch], batch, patch, rng)
        lr_now = learning_rate(args.lr, state.step, progress, args.warmup)
        for group in opt.param_groups:
            group["lr"] = lr_now
        loss = F.l1_loss(model(lr_img), hr_img)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(nn.utils.clip_grad_norm_(model.parameters(), args.clip))
        opt.step()
        state.step += 1
        ema_update(ema, model, min(args.ema, (1 + state.step) / (10 + state.step)))
        value = loss.item()
        state.loss_avg = value if math.isnan(state.loss_avg) else 0.95 * state.loss_avg + 0.05 * value

        if state.step % args.log_every == 0 or state.step == 1:
            print(
                f"step {state.step:5d}  {state.elapsed / 60:5.1f} min  win/{div} patch {patch} b{batch}  "
                f"lr {lr_now:.2e}  loss {value:.4f}  avg {state.loss_avg:.4f}  |g| {grad_norm:.3f}",
                flush=True,
            )
        if time.time() - last_ckpt >= CHECKPOINT_EVERY_S:
            save_checkpoint(model, ema, opt, state)
            last_ckpt = time.time()

    state.elapsed = time.time() - start
    save_checkpoint(model, ema, opt, state)
    print(
        f"done: {state.step} steps in {state.elapsed / 60:.1f} min, final smoothed L1 {state.loss_avg:.4f}",
        flush=True,
    )
    save_weights(ema, args.out, state.step)
    print(f"saved {args.out} ({args.out.stat().st_size} bytes)", flush=True)
    if args.set5.is_dir():
        report_set5(load_weights(args.out), args.set5)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=56.0, help="wall-clock training budget (hard stop)")
    p.add_argument("--steps", type=int, default=0, help="schedule by this many steps instead of by time")
    p.add_argument("--batch", type=int, default=4, help="batch with the official windows")
    p.add_argument("--patch", type=int, default=256, help="HR crop with the official windows (LR = /4)")
    p.add_argument("--small-frac", type=float, default=0.8, help="fraction of the run with reduced windows")
    p.add_argument("--small-div", type=int, default=4, help="window divisor in the reduced-window phase")
    p.add_argument("--small-batch", type=int, default=16)
    p.add_argument("--small-patch", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=10, help="linear learning-rate warm-up steps")
    p.add_argument("--clip", type=float, default=1.0, help="gradient-norm clip")
    p.add_argument("--ema", type=float, default=0.999, help="EMA decay (warmed up as (1+t)/(10+t))")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--data", type=Path, default=DATA, help="train291 folder (t91/ and bsd200/)")
    p.add_argument("--set5", type=Path, default=SET5, help="Set5 folder for the final PSNR report")
    p.add_argument("--out", type=Path, default=Path("weights/sst-light_x4.safetensors"))
    p.add_argument("--resume", type=Path, default=None, help=f"checkpoint to continue (saved to {CHECKPOINT})")
    p.add_argument("--eval", type=Path, default=None, metavar="WEIGHTS", help="only report Set5 for WEIGHTS")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.eval is not None:
        torch.set_num_threads(args.threads)
        report_set5(load_weights(args.eval), args.set5)
        return
    train(args)


if __name__ == "__main__":
    main()
