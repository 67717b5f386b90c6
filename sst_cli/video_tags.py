"""The labels a video's container and streams carry, kept on the upscaled file.

Films and series come with several audio and subtitle tracks told apart by their tags (``language``, ``title``)
and flags (default, forced, hearing impaired); the container has a title, a creation time and chapters.
Copying a stream's packets does not copy them (FFmpeg's stream template takes the codec parameters only), so
they are copied here. Tags that the muxer or encoder writes anew are left out, and so are the statistics that
mkvmerge stores per stream (bit rate, byte and frame counts) for the re-encoded video, whose bytes change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Written anew by the muxer or encoder (timecode: kept by video.py as the encoder's own), or muxer-specific.
_REWRITTEN = {"duration", "encoder", "major_brand", "minor_version", "compatible_brands", "rotate", "timecode"}
# mkvmerge's statistics of a stream's bytes: "BPS", "NUMBER_OF_FRAMES", "_STATISTICS_TAGS", each may carry "-eng".
_STATISTICS = ("bps", "number_of_frames", "number_of_bytes", "_statistics_")


def kept_tags(tags: Mapping[str, str], reencoded: bool = False) -> dict[str, str]:
    """The tags worth writing again; ``reencoded``: of a stream whose bytes change (its statistics are dropped)."""
    kept = {}
    for key, value in tags.items():
        name = key.lower().split("-")[0]
        if name in _REWRITTEN or (reencoded and name.startswith(_STATISTICS)):
            continue
        kept[key] = value
    return kept


def keep_labels(source: Any, target: Any, reencoded: bool = False) -> None:
    """``target`` stream (being written) gets ``source`` stream's tags and disposition flags."""
    target.metadata.update(kept_tags(source.metadata, reencoded))
    target.disposition = source.disposition


def keep_container_labels(source: Any, target: Any) -> None:
    """``target`` container (before its header is written) gets ``source`` container's tags (title, creation
    time, ...) and chapters (start, end, title: timestamps are not changed by upscaling)."""
    target.metadata.update(kept_tags(source.metadata))
    chapters = source.chapters()
    if chapters:
        target.set_chapters(chapters)
