#!/usr/bin/env bash
# Stage FlashAttention-4 (flash-attn-4) and the wheels it needs for the GPU machine (Python 3.12, CUDA 13,
# no network) in .gpu/wheels/ (ignored by git). The carry limit is 64 MB per call and one wheel,
# nvidia-cutlass-dsl-libs-cu13, is ~92 MB, so it is split in two halves and the other wheels shared out so
# that each half stays near 53 MB: carry .gpu/wheels/a in one call and .gpu/wheels/b in the next call to the
# same warm machine; benchmarks/gpu_prelude.sh reassembles the halves in /tmp/sst/wheels and installs the set.
#   benchmarks/gpu_wheels.sh            # then: run(carry=[".gpu/wheels/a"]), run(carry=[".gpu/wheels/b"])
set -eu
cd "$(dirname "$0")/.."
dest=.gpu/wheels
rm -rf "$dest" && mkdir -p "$dest/all" "$dest/a" "$dest/b"
python3 -m pip download -q --no-deps --only-binary=:all: -d "$dest/all" \
  --python-version 3.12 --implementation cp --abi cp312 --platform any \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  "flash-attn-4>=4.0.0b1" "nvidia-cutlass-dsl==4.8.1" "nvidia-cutlass-dsl-libs-base==4.8.1" \
  "nvidia-cutlass-dsl-libs-cu13==4.8.1" "nvidia-cutlass-dsl-libs-core==4.8.1" "quack-kernels>=0.5.3" \
  "apache-tvm-ffi>=0.1.11,<0.2" torch-c-dlpack-ext "cuda-bindings>=13,<14" cuda-pathfinder protobuf
for wheel in "$dest"/all/*.whl; do  # the big one in two halves, a and b
  if [ "$(stat -c %s "$wheel")" -gt $((60 * 1024 * 1024)) ]; then
    split -n 2 -d "$wheel" "$dest/a/$(basename "$wheel").part"
    mv "$dest/a/$(basename "$wheel").part01" "$dest/b/" && rm "$wheel"
  fi
done
for wheel in $(ls -S "$dest"/all/*.whl); do  # the others, largest first, each to the lighter half
  if [ "$(du -sb "$dest/a" | cut -f1)" -le "$(du -sb "$dest/b" | cut -f1)" ]; then cp "$wheel" "$dest/a/"; else cp "$wheel" "$dest/b/"; fi
done
rm -rf "$dest/all"
du -sh "$dest/a" "$dest/b"
