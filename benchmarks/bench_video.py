"""Video throughput: seconds per frame of ``upscale_video`` against the bare network, decode and encode on their own.

For each size a short H.264 clip with AAC audio is made from the bundled photo (panned a few pixels per
frame, so frames differ). Measured, in this order, on the same frames and in the same process:

* decode: demux + decode + conversion to RGB arrays, no network;
* network: ``Upscaler.upscale_batch`` on the decoded arrays, as many frames per forward pass as the pipeline
  stacks (``Upscaler.images_per_pass``): the network plus its float conversions, nothing of the codecs;
* encode: conversion back to YUV + encoding of upscaled-size frames (the frames are the bicubic-upscaled
  inputs, since the network's output does not change encoding time much);
* with ``--one-per-pass``, also the network on one frame per pass (``Upscaler.upscale``), to see what stacking
  gains;
* host: ``Upscaler.upscale_batch`` with a nearest-neighbour stand-in for the network, on the same device: the
  work around the network that runs in the caller's thread (uint8 -> float, the finite check, float -> uint8),
  to tell whether moving it into the codec threads could pay (on the CPU it is a fraction of a per cent);
* pipeline: ``sst_cli.video.upscale_video`` end to end (decoding ahead and encoding behind the network in
  threads, audio copy, mux).

Printed: seconds per frame of each, pipeline frames/s, ratio = pipeline / (network + decode + encode) (the
issue's goal: at most 1.2; below 1 when the codecs overlap the network) and pipeline / network. ``--json PATH``
also writes the figures there. On a GPU, one warm-up pass on the clip's own frames comes first (kernels and
allocator), e.g.:

    PYTHONPATH=. python benchmarks/bench_video.py --sizes 854x480 --frames 2 --scale 2
    PYTHONPATH=. python benchmarks/bench_video.py --sizes 854x480 1920x1080 --frames 60 --scale 2 \
        --model sst-l --untrained --device cuda --precision bf16 --json video-gpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import torch
from PIL import Image

from sst_cli import Upscaler
from sst_cli.video import upscale_video
from sst_cli.video_io import VideoOptions, array_to_frame, frame_to_array, plan_encoding, probe_video
from sst_cli.zoo import create_model

PHOTO = Path(__file__).resolve().parents[1] / "examples" / "rocket.jpg"


def make_clip(path: Path, width: int, height: int, frames: int) -> None:
    photo = Image.open(PHOTO).convert("RGB").resize((width + 4 * frames, height), Image.Resampling.LANCZOS)
    pixels = np.asarray(photo)
    with av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=25, options={"crf": "18"})
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        sound = out.add_stream("aac", rate=48000)
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(pixels[:, 4 * i : 4 * i + width]), format="rgb24")
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
        samples = 48000 * frames // 25
        for start in range(0, samples, 1024):
            wave = np.sin(np.arange(start, start + 1024, dtype=np.float32)[None] * 0.03)
            chunk = av.AudioFrame.from_ndarray(wave, format="fltp", layout="mono")
            chunk.sample_rate, chunk.pts = 48000, start
            out.mux(sound.encode(chunk))
        out.mux(sound.encode(None))


def decode_arrays(path: Path) -> tuple[list[np.ndarray], list[av.VideoFrame], float]:
    started = time.perf_counter()
    with av.open(str(path)) as clip:
        frames = list(clip.decode(clip.streams.video[0]))
        arrays = [frame_to_array(f, 8) for f in frames]
    return arrays, frames, time.perf_counter() - started


def encode_seconds(path: Path, frames: list[av.VideoFrame], scale: int, up: Upscaler, folder: Path) -> float:
    info = probe_video(path)
    plan = plan_encoding(info, info.width * scale, info.height * scale, VideoOptions())
    big = [
        np.asarray(Image.fromarray(frame_to_array(f, 8)).resize((plan.width, plan.height), Image.Resampling.BICUBIC))
        for f in frames
    ]
    started = time.perf_counter()
    with av.open(str(folder / "encode.mp4"), "w") as out:
        stream = out.add_stream(plan.codec, rate=25, options=plan.options)
        stream.width, stream.height, stream.pix_fmt = plan.width, plan.height, plan.pix_fmt
        for i, (array, like) in enumerate(zip(big, frames, strict=True)):
            frame = array_to_frame(array, plan, like)
            frame.pts, frame.time_base = i, Fraction(1, 25)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return time.perf_counter() - started


class _Nearest(torch.nn.Module):
    """Pixel replication at the network's scale: what ``upscale_batch`` costs around a network that costs ~nothing."""

    def __init__(self, scale: int) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.interpolate(x, scale_factor=self.scale, mode="nearest")


def host_seconds(up: Upscaler, arrays: list[np.ndarray], per_pass: int) -> float:
    """Seconds per frame of ``upscale_batch`` around a stand-in network (after one warm-up pass)."""
    precision = "fp32" if up.dtype == torch.float32 else "bf16"
    stand_in = Upscaler(_Nearest(up.scale), device=str(up.device), precision=precision, tile=0)
    stand_in.upscale_batch(arrays[:per_pass])
    started = time.perf_counter()
    for start in range(0, len(arrays), per_pass):
        stand_in.upscale_batch(arrays[start : start + per_pass])
    if up.device.type == "cuda":
        torch.cuda.synchronize(up.device)
    return (time.perf_counter() - started) / len(arrays)


def measure(
    up: Upscaler, width: int, height: int, frames: int, warmup: bool, single: bool
) -> dict[str, float | int | str | None]:
    """Decode, network, encode and pipeline seconds for one clip of this size (made in a temporary folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        clip = folder / "clip.mp4"
        make_clip(clip, width, height, frames)
        arrays, decoded, decode = decode_arrays(clip)
        per_pass = up.images_per_pass(height, width)
        if warmup:
            up.upscale_batch(arrays[:per_pass])
        started = time.perf_counter()
        for start in range(0, len(arrays), per_pass):
            up.upscale_batch(arrays[start : start + per_pass])
        network = time.perf_counter() - started
        alone = None
        if single:  # the same frames one per pass, as before frames were stacked
            started = time.perf_counter()
            for array in arrays:
                up.upscale(array)
            alone = (time.perf_counter() - started) / len(arrays)
        print(f"  {width}x{height}: {per_pass} frame(s) per pass; decode {decode / len(arrays):.4f} s/f, network "
              f"{network / len(arrays):.4f} s/f", flush=True)  # fmt: skip
        encode = encode_seconds(clip, decoded, up.scale, up, folder)
        host = host_seconds(up, arrays, per_pass)
        started = time.perf_counter()
        result = upscale_video(up, clip, folder / "out.mp4")
        pipeline = time.perf_counter() - started
    n = result.frames
    return {
        "input": f"{width}x{height}", "output": f"{width * up.scale}x{height * up.scale}", "frames": n,
        "frames_per_pass": per_pass, "decode_s_per_frame": decode / n, "network_s_per_frame": network / n,
        "encode_s_per_frame": encode / n, "pipeline_s_per_frame": pipeline / n, "frames_per_second": n / pipeline,
        "ratio": pipeline / (network + decode + encode), "ratio_to_network": pipeline / network,
        "network_one_per_pass_s_per_frame": alone, "host_s_per_frame": host,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["854x480"], help="input WxH, e.g. 854x480 1920x1080")
    parser.add_argument("--frames", type=int, default=3)
    parser.add_argument("--scale", type=int, default=2)
    parser.add_argument("--model", default="sst-light-291")
    parser.add_argument("--untrained", action="store_true", help="random weights of --model (same time, no download)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="auto", help="auto (bf16 on GPUs that support it), fp32, bf16")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--one-per-pass", action="store_true", help="also time the network on one frame per pass")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.untrained:
        torch.manual_seed(0)
        up = Upscaler(create_model(args.model, args.scale).eval(), device=args.device, precision=args.precision)
        label = f"{args.model} x{args.scale}, untrained weights"
    elif args.model == "sst-light-291" and args.scale != 4:
        # The bundled weights are x4 only; the x2 network has the same body (only its upsampler is smaller),
        # and time does not depend on weight values, so the SST-light x2 architecture is timed untrained.
        torch.manual_seed(0)
        up = Upscaler(create_model("sst-light", args.scale).eval(), device=args.device, precision=args.precision)
        label = f"sst-light x{args.scale} (architecture of sst-light-291, untrained weights: only x4 is bundled)"
    else:
        up = Upscaler(args.model, args.scale, device=args.device, precision=args.precision)
        label = f"{args.model} x{up.scale}"
    cpu = platform.processor() or platform.machine()
    gpu = torch.cuda.get_device_name(up.device) if up.device.type == "cuda" else None
    machine = (f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {cpu}, {os.cpu_count()} cores, {args.threads} torch "
               f"threads{f', {gpu}' if gpu else ''}; torch {torch.__version__}, PyAV {av.__version__}")  # fmt: skip
    print(machine)
    print(f"model {label}; {up.device}, {up.dtype}, --tile auto; one warm-up frame of 64x64 before timing")
    up.upscale(np.zeros((64, 64, 3), np.uint8))
    print("| input | output | frames | per pass | decode s/f | network s/f | encode s/f | pipeline s/f | frames/s | "
          "ratio | pipeline / network |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for size in args.sizes:
        width, height = (int(v) for v in size.lower().split("x"))
        row = measure(up, width, height, args.frames, warmup=up.device.type != "cpu", single=args.one_per_pass)
        rows.append(row)
        print(f"| {row['input']} | {row['output']} | {row['frames']} | {row['frames_per_pass']} | "
              f"{row['decode_s_per_frame']:.4f} | {row['network_s_per_frame']:.4f} | {row['encode_s_per_frame']:.4f} | "
              f"{row['pipeline_s_per_frame']:.4f} | {row['frames_per_second']:.4f} | {row['ratio']:.3f} | "
              f"{row['ratio_to_network']:.3f} |", flush=True)  # fmt: skip
        print(f"  around the network (uint8 <-> float, finite check; a stand-in network): "
              f"{row['host_s_per_frame']:.4f} s/f, inside the network figure")  # fmt: skip
        if row["network_one_per_pass_s_per_frame"] is not None:
            print(f"  network with one frame per pass: {row['network_one_per_pass_s_per_frame']:.4f} s/f")
        if args.json is not None:  # after every size, so a run stopped early keeps what it measured
            record = {"machine": machine, "model": label, "device": str(up.device), "dtype": str(up.dtype),
                      "command": " ".join(sys.argv), "rows": rows}  # fmt: skip
            args.json.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
