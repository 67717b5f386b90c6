#!/usr/bin/env bash
# First thing in every call on the device machine (run from the checkout there): install sst-cli without
# dependencies (the machine has them and no network), link ../shared to .gpu/shared when the real one is
# absent, and copy the staged data (benchmarks/gpu_stage.py) to /tmp/sst, which lasts while the machine
# stays warm, so that later calls need not carry it again.
set -eu
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/sst-pip.log 2>&1 || {
  cat /tmp/sst-pip.log
  exit 1
}
[ -e ../shared ] || { [ -d .gpu/shared ] && ln -s "$PWD/.gpu/shared" ../shared; }
mkdir -p /tmp/sst/eval
[ -d .gpu/train291 ] && cp -rn .gpu/train291 /tmp/sst/
[ -d .gpu/shared/datasets ] && cp -rn .gpu/shared/datasets/Set5 .gpu/shared/datasets/Set14 /tmp/sst/eval/
[ -d .gpu/eval/B100 ] && cp -rn .gpu/eval/B100 /tmp/sst/eval/
# FlashAttention-4 wheels (benchmarks/gpu_wheels.sh), carried in two calls: gather, join the split wheel,
# install once the set is complete.
mkdir -p /tmp/sst/wheels
for part in .gpu/wheels/a .gpu/wheels/b; do [ -d "$part" ] && cp -n "$part"/* /tmp/sst/wheels/; done
for first in /tmp/sst/wheels/*.part00; do
  [ -e "$first" ] && [ -e "${first%00}01" ] && cat "$first" "${first%00}01" >"${first%.part00}" && rm "$first" "${first%00}01"
done
if ls /tmp/sst/wheels/flash_attn_4-*.whl >/dev/null 2>&1 && ! ls /tmp/sst/wheels/*.part* >/dev/null 2>&1 \
  && ! python3 -c "import flash_attn.cute" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps /tmp/sst/wheels/*.whl >/tmp/sst-fa4.log 2>&1 || cat /tmp/sst-fa4.log
fi
# PyAV for the video step (benchmarks/gpu_stage.py video), when carried and not yet there.
if ls .gpu/wheels/video/av-*.whl >/dev/null 2>&1 && ! python3 -c "import av" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps .gpu/wheels/video/av-*.whl >/tmp/sst-av.log 2>&1 || cat /tmp/sst-av.log
fi
echo "prelude: sst-cli $(python3 -c 'import sst_cli; print(sst_cli.__version__)'), torch $(python3 -c 'import torch; print(torch.__version__)'); /tmp/sst: $(ls /tmp/sst /tmp/sst/eval | tr '\n' ' '); fa4: $(python3 -c 'import flash_attn.cute' 2>/dev/null && echo installed || echo absent); av: $(python3 -c 'import av; print(av.__version__)' 2>/dev/null || echo absent)"
