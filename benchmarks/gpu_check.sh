#!/usr/bin/env bash
# The whole GPU check in one command: golden vectors per kernel, SST's fused Triton kernels (gpu_kernels.py), the
# authors' code side by side (Table S4 protocol), kernels, bf16 quality, big images, end to end, the test suite,
# layouts and torch.compile; on request (not in the default list) the 4K tile sweep, the small-input profile,
# --compile's cache timing, the rows A/B (gpu_rows.py) and the training probe. benchmarks/gpu_session.sh runs
# the steps that fit one session of device time.
#
#   benchmarks/gpu_check.sh OUTDIR [STEP ...]      (default: every step, in the order below)
#
# Each step writes OUTDIR/<step>*.json and appends to OUTDIR/log.txt; a failing step is logged and the next
# one runs. GPU_CHECK_BUDGET (seconds, default 3600): no step runs past it (each is stopped at it, and one with
# less than 30 s left is skipped).
# Needs sst-cli importable (pip install --no-deps -e .) and ../shared beside the checkout (bench/, golden/,
# datasets/Set14); on the device machine benchmarks/gpu_stage.py's .gpu/shared stands in for it (its `tests` part adds
# the golden .pth files that the cudatests and tests steps read).
# FlashAttention-4 (--attention fa4) runs in the golden and kernels steps once installed: benchmarks/gpu_wheels.sh
# stages its wheels in two halves, carried in two calls; benchmarks/gpu_prelude.sh installs them.
set -u
out=${1:?usage: benchmarks/gpu_check.sh OUTDIR [STEP ...]}
shift
steps=${*:-env golden fused cudatests official quality e2e big kernels tests layout video}
cd "$(dirname "$0")/.."
mkdir -p "$out"
out=$(cd "$out" && pwd)
log="$out/log.txt"
shared=../shared
work=$(mktemp -d)
budget=${GPU_CHECK_BUDGET:-3600}
export PYTHONUNBUFFERED=1
start=$SECONDS

run() {  # run NAME LIMIT_S COMMAND...: time-limited (never past the budget), logged, never fatal
  local name=$1 limit=$2 left=$((budget - (SECONDS - start)))
  shift 2
  ((limit > left)) && limit=$left
  if ((limit < 30)); then
    echo "=== $name: skipped, $left s of the budget of $budget s left" | tee -a "$log"
    return
  fi
  echo "=== $name: $* ($(date -u +%H:%M:%S), $((SECONDS - start)) s in)" | tee -a "$log"
  timeout "$limit" "$@" 2>&1 | tee -a "$log"
  echo "--- $name: exit ${PIPESTATUS[0]}" | tee -a "$log"
}

step_env() {
  nvidia-smi 2>&1 | tee -a "$log"
  python3 - "$out/env.json" <<'PY' 2>&1 | tee -a "$log"
import json, subprocess, sys, datetime, torch
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                      "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"), "nvidia_smi": smi,
       "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
       "gpu": torch.cuda.get_device_name(), "capability": torch.cuda.get_device_capability()}
print(env)
open(sys.argv[1], "w").write(json.dumps(env, indent=2) + "\n")
PY
}

step_golden() { run golden 300 python3 benchmarks/gpu_golden.py --device cuda --json "$out/golden.json"; }

# SST's fused Triton kernels: units and golden vectors against the plain path, SST-L x2/x3 with and without them
step_fused() {  # FUSED_STEPS: gpu_kernels.py's --steps (default all four)
  run fused 600 python3 benchmarks/gpu_kernels.py --steps "${FUSED_STEPS:-units,golden,timing,tiles}" \
    --json "$out/fused.json"
}

# whether leaving out the query rows each layer crops pays on CUDA too (on the CPU only since 2026-11-26)
step_rows() { run rows 300 python3 benchmarks/gpu_rows.py --runs 10 --json "$out/rows.json"; }

step_probe() {  # issue 29: training patches/s, SST-light x4 bf16, batch 64 (data: /tmp/sst/train291, the prelude's)
  run probe 200 python3 benchmarks/train_probe.py --data /tmp/sst/train291 --batches 64 --variants bf16 \
    --seconds "${PROBE_S:-40}" --json "$out/probe.json"
}

step_official() {  # Table S4 protocol, ours and the authors' code side by side, fp32 and bf16
  run official 600 python3 "$shared/bench/compare_official.py" --device cuda -m sst-light -m sst -m sst-l \
    -s 2 -s 3 -s 4 --json "$out/official.json"
}

step_cudatests() { run cudatests 300 python3 -m pytest -q -p no:cacheprovider -k cuda tests/test_attention.py; }

step_kernels() {  # each attention kernel that runs here (sdpa = PyTorch's own pick, shown by auto), x2
  local backends
  backends=$(python3 -c "from sst_cli.archs.attention import available_backends as a; print(*a())")
  for k in $backends; do
    case $k in math | sdpa) continue ;; esac
    run "kernels-$k" 300 sst bench --device cuda -m sst-light -m sst -m sst-l -s 2 --attention "$k" \
      --json "$out/kernels-$k.json"
  done
}

step_quality() {
  run quality 300 python3 benchmarks/bf16_quality.py "$shared/datasets/Set14/LR_bicubic/X4" --device cuda \
    --json "$out/bf16_quality.json"
}

step_big() {  # a 3840x2160 input through SST-L in bf16: tile auto vs the whole image, x2 and x4
  for s in 2 4; do
    for t in auto 0; do
      run "big-x$s-tile$t" 400 sst bench --device cuda -m sst-l -s $s --precision bf16 \
        --tiled "$((3840 * s))x$((2160 * s))" --tile $t --runs 1 --warmup 1 --json "$out/big-x$s-tile$t.json"
    done
  done
}

step_e2e() {  # the whole command (load, read, infer, write) next to the bare network on the same size
  python3 - "$work" <<'PY' 2>&1 | tee -a "$log"
import sys
from PIL import Image
from safetensors.torch import save_file
from sst_cli import create_model
work = sys.argv[1]
save_file(create_model("sst-l+", 4).state_dict(), f"{work}/sst-l+_x4_random.safetensors")
Image.open("examples/rocket.jpg").convert("RGB").resize((1024, 684), Image.BICUBIC).save(f"{work}/photo.png")
PY
  local t0=$SECONDS
  run e2e 300 bash -c "time sst upscale $work/photo.png --model sst-l+ --scale 4 --device cuda \
    --weights $work/sst-l+_x4_random.safetensors -o $work/photo_x4.png -v"
  echo "e2e wall: $((SECONDS - t0)) s" | tee -a "$log"
  run e2e-bare 300 sst bench --device cuda -m sst-l+ -s 4 --precision bf16 --size 4096x2736 --runs 3 --warmup 1 \
    --json "$out/e2e-bare.json"
  # the same command again (Triton's and the OS's caches warm) under cProfile and -X importtime: where the wall
  # time beyond the network goes (2026-11-27: start-up 6.0 s, write 2.4 s, 8.5 s unaccounted for)
  run e2e-profile 300 bash -c "python3 -X importtime -m cProfile -o $out/e2e.prof -m sst_cli upscale \
    $work/photo.png --model sst-l+ --scale 4 --device cuda --weights $work/sst-l+_x4_random.safetensors \
    -o $work/photo_x4_again.png -v 2>$out/e2e-stderr.txt; grep -v '^import time:' $out/e2e-stderr.txt"
  echo "slowest imports (cumulative us):" | tee -a "$log"
  grep '^import time:' "$out/e2e-stderr.txt" | sort -t'|' -k2 -n -r | head -n 15 | tee -a "$log"
  python3 -c "import pstats, sys; pstats.Stats(sys.argv[1]).sort_stats('cumulative').print_stats(40)" \
    "$out/e2e.prof" 2>&1 | tail -n 60 | tee -a "$log"
}

step_sweep() {  # issue 25: --tile auto against fixed tiles, 3840x2160 input, SST-L bf16 (SWEEP_SCALES, SWEEP_TILES)
  for s in ${SWEEP_SCALES:-2 4}; do
    for t in ${SWEEP_TILES:-auto 256 384 512 768 1024}; do
      run "sweep-x$s-tile$t" 300 sst bench --device cuda -m sst-l -s $s --precision bf16 \
        --tiled "$((3840 * s))x$((2160 * s))" --tile $t --runs 1 --warmup 1 --json "$out/sweep-x$s-tile$t.json"
    done
  done
}

step_profile() {  # why SST-light at Table S4's x3/x4 inputs is not faster than the authors' code: kernels, host, graphs
  run profile 300 python3 benchmarks/gpu_profile.py --runs 10 --json "$out/profile.json"
}

step_compile() {  # --compile: first and second process sharing one cache, compiled vs eager, SST-L x2 bf16
  # COMPILE_VARIANTS="regions whole" adds the whole-network compile (249 s on 2026-11-25) for the side by side
  # shellcheck disable=SC2086  # the variants are words
  run compile 600 python3 benchmarks/bench_compile.py --device cuda --model sst-l --scale 2 --size 1280x720 \
    --precision bf16 --runs 5 --variants ${COMPILE_VARIANTS:-regions} --json "$out/compile.json"
}

step_tests() {  # the whole suite on the GPU machine (CUDA-only tests included); B100 is not carried
  local jobs=()
  python3 -c "import xdist" 2>/dev/null && jobs=(-n 8)
  run tests 400 python3 -m pytest -q -p no:cacheprovider "${jobs[@]}" -k "not B100" tests
}

step_layout() {  # what could pay on the GPU: channels-last, torch.compile, CUDA graphs (sst x2)
  for opt in "--channels-last on" "--channels-last off" "--compile default" "--compile reduce-overhead"; do
    local name=${opt// /}
    run "layout$name" 400 sst bench --device cuda -m sst -s 2 $opt --json "$out/layout$name.json"
  done
}

step_video() {  # issue 28: upscale_video against the bare network, decode and encode; 480p and 1080p x2 (PyAV needed)
  run video 500 python3 benchmarks/bench_video.py --sizes 854x480 1920x1080 --scale 2 --model sst-l \
    --untrained --device cuda --precision bf16 --one-per-pass --frames "${VIDEO_FRAMES:-30}" --json "$out/video.json"
}

for s in $steps; do
  if ((SECONDS - start > budget)); then
    echo "=== $s: skipped, the budget of $budget s is spent" | tee -a "$log"
    continue
  fi
  "step_$s"
done
rm -rf "$work"
echo "=== done in $((SECONDS - start)) s" | tee -a "$log"
