"""One process of the ``--compile`` tests: a tiny random SST upscaled eager and compiled; JSON on stdout.

Run as ``python compile_child.py`` with ``TORCHINDUCTOR_CACHE_DIR`` set; prints the compiled run's largest
difference from eager, the messages, and inductor's FX-graph cache hits and misses in this process.
"""

from __future__ import annotations

import json
import time

import torch

from sst_cli import SST, SSTConfig, Upscaler


def tiny_sst() -> SST:
    """Two blocks of two layers (windows 4 and 8), random weights large enough that every layer matters."""
    torch.manual_seed(0)
    cfg = SSTConfig(
        dim=8, window_sizes=(4, 8), num_heads=1, ranks=(2, 2), n_blocks=2,
        exp_ratio=1.5, upscaling_factor=2, upsampler_type="pixelshuffle",
    )  # fmt: skip
    model = SST(**cfg.to_kwargs())
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model.eval()


def main() -> None:
    from torch._dynamo.utils import counters

    torch.set_num_threads(1)
    torch.manual_seed(1)
    image = torch.rand(3, 32, 32)  # four 16 px tiles with 8 px of context: 24x24 each (one shape, one compile)
    model = tiny_sst()
    eager = Upscaler(model, tile=16, tile_overlap=8, compile="off").run(image).image
    messages: list[str] = []
    up = Upscaler(model, tile=16, tile_overlap=8, compile="on", on_message=messages.append)
    started = time.perf_counter()
    compiled = up.run(image).image
    first_run = time.perf_counter() - started
    assert up.compiled is not None
    out = {
        "compiled": not up.compiled.eager,
        "max_abs_diff": (compiled - eager).abs().max().item(),
        "max_abs": eager.abs().max().item(),
        "first_run_s": first_run,
        "compile_s": up.compiled.compile_seconds,
        "messages": messages,
        "hits": counters["inductor"]["fxgraph_cache_hit"],
        "misses": counters["inductor"]["fxgraph_cache_miss"],
        "graphs": counters["stats"]["unique_graphs"],
        "layers": len(model.compile_regions()),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
