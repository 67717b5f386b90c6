"""Option values that the library checks and the CLI shows in its help.

Kept free of heavy imports (no torch), so that ``sst --help``, ``--version`` and option errors answer at once.
"""

from __future__ import annotations

DEFAULT_MODEL = "sst-light-291"  # bundled: weights trained by sst-cli on 291 images, not the paper's
DEFAULT_SCALE = 4
BACKENDS = ("auto", "sdpa", "sdpa-flash", "sdpa-cudnn", "flash-attn", "fa3", "fa4", "math", "sdpa-bias", "native")
PRECISIONS = ("auto", "fp32", "bf16")
BENCH_PRECISIONS = ("fp32", "bf16")
COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune")
# sst bench --compile also takes upscale's words for "compile" and "don't": on is the default mode, off none
COMPILE_MODE_ALIASES = {"on": "default", "off": "none"}
COMPILE_CHOICES = ("auto", "on", "off")  # sst upscale --compile / UpscaleOptions.compile (compiling.py)
ALPHA_MODES = ("model", "resize")
DEVICE_HELP = "auto, cpu, cuda, cuda:N or mps"
