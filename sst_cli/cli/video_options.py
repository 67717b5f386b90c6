"""The video options of ``sst upscale`` (typer annotations; torch- and PyAV-free, so --help stays fast)."""

from __future__ import annotations

from typing import Annotated

import typer

CodecOption = Annotated[
    str | None,
    typer.Option(
        "--codec",
        metavar="ENCODER",
        help="Video: FFmpeg encoder (libx264, libx265, libvpx-vp9, libsvtav1, ffv1, ...). Default: the input's "
        "family where this FFmpeg has an encoder, else libx264.",
    ),
]
CrfOption = Annotated[
    int | None, typer.Option("--crf", metavar="N", help="Video: constant quality (x264/x265/VP9/AV1; lower is better).")
]
PixFmtOption = Annotated[
    str | None,
    typer.Option(
        "--pix-fmt", metavar="FORMAT", help="Video: output pixel format (default: the input's, 10-bit stays 10-bit)."
    ),
]
FramesPerPassOption = Annotated[
    int | None,
    typer.Option(
        "--frames-per-pass",
        metavar="N",
        help="Video: at most N consecutive frames in one forward pass (default: as many as memory allows, up to "
        "8; 1 with --lossless, so that each frame is bit for bit what the image path gives).",
    ),
]
LosslessOption = Annotated[
    bool, typer.Option("--lossless", help="Video: FFV1 in MKV with RGB samples, each frame exactly the network's.")
]
