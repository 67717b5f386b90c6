"""What a weights file holds, as ``sst models info FILE`` says it: architecture, scale, parameters, purpose,
which library runs it, and what the engine learnt from the model's descriptor."""

from __future__ import annotations

import os

from . import hub
from .archs import describe
from .loader import ConfigSource, load_model, weights_source


def about_file(
    path: str | os.PathLike[str], variant: str | None = None, config: ConfigSource | None = None
) -> dict[str, object]:
    """Facts about the model in ``path`` (loaded on the CPU, into ``variant``'s architecture, or built from
    ``config``'s constructor keywords, when given). An ``hf://`` reference is downloaded into the Hugging Face
    cache first, unless it is there already."""
    source = weights_source(path)
    local = hub.download(hub.parse_hf_reference(source), rehash=True) if isinstance(source, str) else source
    model = load_model(local, variant=variant, config=config)
    d = describe(model)
    facts: dict[str, object] = {
        "file": local,
        "sha256": hub.sha256_of(local),
        "architecture": d.architecture,
        "scale": f"x{d.scale}",
        "parameters": f"{d.parameters:,}",
        "purpose": "SR" if d.scale > 1 else "Restoration",
        "library": "sst-cli",
    }
    extra = getattr(model, "facts", None)  # models loaded through spandrel say more (sst_cli.spandrel)
    if extra is not None:
        facts |= {
            "purpose": extra.purpose,
            "library": extra.library,
            "tags": ", ".join(extra.tags) or "-",
            "channels": f"{extra.input_channels} in, {extra.output_channels} out",
            "size requirements": extra.size_requirements,
            "precisions": "fp32"
            + (", bf16" if extra.supports_bf16 else "")
            + (", fp16" if extra.supports_fp16 else ""),
            "tiling (spandrel)": extra.tiling,
        }
    exact = f"{d.exact_context} px (measured)" if d.exact_context is not None else "none (tiles are blended)"
    facts |= {
        "tile alignment": f"{d.size_multiple} px",
        "exact context": exact,
        "default context": f"{d.default_context} px",
    }
    if d.seam_note:
        facts["seams"] = d.seam_note
    return facts
