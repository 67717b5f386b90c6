"""Loading a state dict none of sst-cli's architectures claims through spandrel, and explaining files that
neither recognises (the nearest spandrel architecture and the keys it lacks)."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping

import torch

from ..errors import CheckpointError
from ..seamcache import cache_key, state_digest
from .context import cached_reach, measure_reach
from .network import SpandrelNetwork

#: spandrel pulls torchvision, whose newest release would replace the user's torch: theirs must be named first.
INSTALL_HINT = "pip install 'spandrel>=0.4.2,<0.5' with the torchvision release made for your torch"


class NotRecognised(CheckpointError):
    """spandrel recognises no architecture in the file; ``nearest``: its nearest one and the keys that one
    lacks ("" if none), for a message that also says what sst-cli recognised."""

    def __init__(self, message: str, nearest: str) -> None:
        super().__init__(message)
        self.nearest = nearest


def available() -> bool:
    """Whether spandrel can be imported (without importing it: it pulls torchvision)."""
    return importlib.util.find_spec("spandrel") is not None


def library_version() -> str:
    import spandrel

    return f"spandrel {spandrel.__version__}"


def _key_sets(condition: object) -> list[list[str]]:
    """The alternative key lists a spandrel ``KeyCondition`` accepts (flattened; [] if not introspectable)."""
    kind, keys = getattr(condition, "_kind", None), getattr(condition, "_keys", None)
    if kind not in ("all", "any") or not isinstance(keys, tuple):
        return []
    options: list[list[str]] = [[]]
    for key in keys:
        subs = [[key]] if isinstance(key, str) else _key_sets(key)
        if not subs:
            return []
        if kind == "all":
            options = [done + sub for done in options for sub in subs][:64]
        else:
            options = subs if options == [[]] else options + subs
    return options


def nearest_miss(state: Mapping[str, object]) -> tuple[str, list[str]] | None:
    """The spandrel architecture whose detection keys this state dict holds most of (at least one), and the
    keys it lacks."""
    import spandrel

    best: tuple[tuple[float, int], str, list[str]] | None = None
    for support in spandrel.MAIN_REGISTRY.architectures("detection"):
        for keys in _key_sets(getattr(support.architecture, "_detect", support.detect)):
            present = sum(key in state for key in keys)
            missing = [key for key in keys if key not in state]
            score = (present / len(keys), present) if keys else (0.0, 0)
            if present and missing and (best is None or score > best[0]):
                best = (score, support.architecture.name, missing)
    return None if best is None else (best[1], best[2])


def load_foreign(state: Mapping[str, torch.Tensor], source: str) -> SpandrelNetwork:
    """The network spandrel recognises in ``state``, described for sst-cli's engine (on the CPU, float32)."""
    import spandrel

    try:
        descriptor = spandrel.ModelLoader().load_from_state_dict(dict(state))
    except spandrel.UnsupportedModelError:
        miss = nearest_miss(state)
        if miss is None:
            sample = ", ".join(list(state)[:4])
            raise NotRecognised(
                f"{source}: neither sst-cli nor spandrel recognises this checkpoint; its first keys are {sample}", ""
            ) from None
        name, missing = miss
        nearest = f"{name}, which also needs {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}"
        raise NotRecognised(
            f"{source}: neither sst-cli nor spandrel recognises this checkpoint; the nearest is {nearest}", nearest
        ) from None
    except (KeyError, ValueError, RuntimeError, AssertionError) as exc:
        raise CheckpointError(f"{source}: spandrel recognised the keys but could not load them: {_plain(exc)}") from exc
    if not isinstance(descriptor, spandrel.ImageModelDescriptor):
        raise CheckpointError(
            f"{source}: {_a(descriptor.architecture.name)} {descriptor.purpose} model needs a mask as well as the "
            "image; sst-cli runs image-to-image models only"
        )
    if descriptor.input_channels not in (1, 3) or descriptor.output_channels not in (1, 3):
        raise CheckpointError(
            f"{source}: {_a(descriptor.architecture.name)} model with {descriptor.input_channels} input and "
            f"{descriptor.output_channels} output channels; sst-cli runs RGB and grayscale models only"
        )
    model = descriptor.model.float().eval()
    req = descriptor.size_requirements
    # spandrel's own call without its inference mode (the measurement needs gradients) and without its clamp
    # (which would hide the field wherever random weights overshoot); private, hence the plain call as fallback.
    call = getattr(descriptor, "_call_fn", None)
    key = cache_key(state_digest(state), "reach", descriptor.input_channels, descriptor.scale, req, library_version())
    try:
        reach = cached_reach(key, lambda: measure_reach(
            model, descriptor.input_channels, descriptor.scale, minimum=req.minimum, multiple_of=req.multiple_of,
            call=call if callable(call) else None,
        ))  # fmt: skip
    except Exception as exc:  # third-party code: whatever it raises, the file is what failed
        raise CheckpointError(
            f"{source}: the {descriptor.architecture.name} model spandrel built from it fails on a test image "
            f"({type(exc).__name__}{': ' + _plain(exc) if str(exc).strip() else ''})"
        ) from exc
    return SpandrelNetwork(descriptor, reach, library_version(), key)


def _plain(exc: BaseException) -> str:
    """An exception as one line: PyTorch's load_state_dict report spans lines and spells shapes as torch.Size."""
    text = " ".join(str(exc).split())
    text = re.sub(r"Error\(s\) in loading state_dict for \w+: ", "", text)
    text = re.sub(
        r"copying a param with shape torch\.Size\((\[[^]]*\])\) from checkpoint, the shape in current model is "
        r"torch\.Size\((\[[^]]*\])\)",
        r"file \1 vs model \2",
        text,
    )
    return _first_mismatches(text) or type(exc).__name__


def _first_mismatches(text: str, shown: int = 3) -> str:
    """``text`` with its first ``shown`` "size mismatch for" clauses and a count of the rest: one wrong-shaped
    tensor upstream mismatches every layer after it, ~30 clauses (3 KB) that bury the first, which says it."""
    starts = [m.start() for m in re.finditer(r"size mismatch for ", text)]
    if len(starts) <= shown:
        return text
    return f"{text[: starts[shown]].rstrip()} ... and {len(starts) - shown} more"


def _a(name: str) -> str:
    """``name`` with its article: an ESRGAN, an OmniSR, a SwinIR (by its first letter)."""
    return f"{'an' if name[:1].upper() in 'AEIOU' else 'a'} {name}"
