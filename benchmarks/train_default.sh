#!/usr/bin/env bash
# How the bundled sst-light-291 weights are trained on one GPU, in two phases that fit the device tool's
# 10-minute calls (weights/TRAINING.md has the figures):
#
#   benchmarks/train_default.sh start OUTDIR    x4 from scratch for START_S seconds, lr not yet decayed
#   benchmarks/train_default.sh finish OUTDIR   x4 resumed, and x2 and x3 started from it, side by side for
#                                               FINISH_S seconds with the lr schedule completed; then eval
#
# The authors' recipe (sst train's defaults) with their total batch of 64. x4 comes first because it is
# the default scale; x2 and x3 start from its weights (sst train --init resizes the upsampler), as the paper
# starts x3 and x4 from x2. The iterations of the finish phase are what fits at the start phase's rate
# times SHARE (each run's part of the GPU when three share it), with 15% to spare: a run that ends early
# has completed its schedule, one cut by the time limit would not have.
# Data and outputs: TRAIN_DATA (default /tmp/sst/train291), RUN_DIR (/tmp/sst/run), EVAL_ROOT (/tmp/sst/eval).
set -u
phase=${1:?usage: train_default.sh start|finish OUTDIR}
out=${2:?usage: train_default.sh start|finish OUTDIR}
cd "$(dirname "$0")/.."
data=${TRAIN_DATA:-/tmp/sst/train291}
run=${RUN_DIR:-/tmp/sst/run}
evalroot=${EVAL_ROOT:-/tmp/sst/eval}
mkdir -p "$out" "$run"
export PYTHONUNBUFFERED=1
common=(--model sst-light-291 --data "$data" --batch 64 --half --checkpoint-every 120 --log-every 30)
weights() { echo "$run/sst-light-291_x$1.safetensors"; }
state() { echo "$run/sst-light-291_x$1.state.pth"; }

nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 5 >"$out/gpu_util.csv" &
sampler=$!

case $phase in
start)
  sst train "${common[@]}" --scale 4 --iters 1000000 --warmup 500 --time-limit "${START_S:-500}" \
    --out "$(weights 4)" 2>&1 | tee "$out/train_x4_start.log"
  ;;
finish)
  seconds=${FINISH_S:-300}
  read -r done_x4 fit < <(python3 - "$(state 4)" "${SHARE:-0.33}" "$seconds" <<'PY'
import sys, torch
state = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
rate = state["iteration"] / state["elapsed"]
print(state["iteration"], int(0.85 * float(sys.argv[2]) * rate * float(sys.argv[3])))
PY
  )
  echo "x4 at iteration $done_x4; $fit more iterations per run fit in $seconds s" | tee "$out/plan.txt"
  pids=()
  sst train "${common[@]}" --scale 4 --resume --iters $((done_x4 + fit)) --warmup 500 --time-limit "$seconds" \
    --out "$(weights 4)" >"$out/train_x4_finish.log" 2>&1 &
  pids+=($!)
  for s in 2 3; do
    sst train "${common[@]}" --scale $s --init "$(weights 4)" --iters "$fit" --time-limit "$seconds" \
      --out "$(weights $s)" >"$out/train_x${s}.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  tail -n 4 "$out"/train_x*.log
  for s in 2 3 4; do
    sst eval --weights "$(weights $s)" -d Set5 -d Set14 -d B100 -s $s --data-root "$evalroot" --device cuda \
      --precision fp32 --attention math --json "$out/eval_x$s.json" -q 2>&1 | tee -a "$out/eval.log"
  done
  ;;
esac
kill $sampler
# Back through the device tool (at most 8 files): the weights and states as they are, the text in one archive.
cp "$run"/*.safetensors "$run"/*.state.pth "$out"/
(cd "$out" && tar czf logs.tgz --remove-files -- *.log *.csv *.json *.txt 2>/dev/null)
ls -la "$out"
