"""Ship weights that ``sst train`` made as the bundled ``sst-light-291`` of one scale.

Copies the EMA tensors into ``weights/sst-light-291_x{S}.safetensors`` with the metadata every bundled file
carries (``variant`` sst-light-291, ``architecture`` sst-light, what it was trained on, and a ``source`` line
saying that these are sst-cli's weights, not the paper's), then records the file and its sha256 in
``weights/manifest.json``. The training's own metadata (iterations, batch, seconds, settings) is kept.

    python benchmarks/bundle_weights.py RUN/sst-light-291_x2.safetensors --scale 2 \\
        --source "sst-cli CPU demo weights: ... ; not the paper's SST-light weights"
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import save_file

from sst_cli.zoo import get_variant

WEIGHTS = Path(__file__).resolve().parent.parent / "weights"
NAME = "sst-light-291"
DATA = "train291 (T91 + BSD200, 291 images)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trained", type=Path, help="the .safetensors that sst train wrote (--out)")
    parser.add_argument("--scale", type=int, required=True)
    parser.add_argument("--source", required=True, help="one line on who trained these weights, how, and how long")
    parser.add_argument("--device", default=None, help="the training device, in words (default: as recorded)")
    args = parser.parse_args()

    with safe_open(str(args.trained), framework="pt") as f:
        metadata = dict(f.metadata() or {})
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no iterator)
    expected = get_variant(NAME).config(args.scale).to_kwargs()
    if json.loads(metadata.get("sst_config", "null")) != expected or metadata.get("scale") != str(args.scale):
        raise SystemExit(f"{args.trained} is not {NAME} x{args.scale} (its sst_config or scale differ)")
    metadata |= {"variant": NAME, "architecture": "sst-light", "data": DATA, "source": args.source}
    if args.device:
        metadata["device"] = args.device
    target = WEIGHTS / f"{NAME}_x{args.scale}.safetensors"
    save_file(tensors, str(target), metadata=metadata)

    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    manifest_path = WEIGHTS / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest["models"][NAME][str(args.scale)].update(bundled=target.name, sha256=digest)
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    print(f"{target} ({target.stat().st_size:,} bytes), sha256 {digest}; manifest.json updated")


if __name__ == "__main__":
    main()
