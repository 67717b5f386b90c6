#!/usr/bin/env bash
# How the bundled sst-light-291 weights are trained on one GPU: in stretches that add up, one device call each
# (weights/TRAINING.md has the recipe and the figures so far).
#
#   benchmarks/train_default.sh stretch SCALE OUTDIR   train SCALE for STRETCH_S seconds, continuing its state
#   benchmarks/train_default.sh eval SCALE OUTDIR      sst eval of the current weights on Set5, Set14, B100
#
# The state of each scale's run lives in the repository, weights/train-state/sst-light-291_xS.state.pth
# (STATE_DIR), about 15 MB for SST-light (weights, EMA, AdamW moments, RNG states, schedule position): a
# stretch resumes it exactly (bit for bit the run an uninterrupted machine would make) and leaves the new
# state in OUTDIR, which the session copies back to STATE_DIR and commits. x2 starts from scratch; x3 and x4
# start from x2 (its state's EMA, or the shipped x2 weights) with lr 2.5e-4, as the paper does (Table S2).
# Each run's lr schedule spans ITERS_XS iterations, fixed when it starts: that, not the stretches, is the run.
#
# Device-tool budget: the tree travels each call (64 MiB with what is carried), so keep one state file in it
# at a time (train x2 to the end, then x3, then x4). The data (.gpu/train291, 39.2 MiB of WebP from
# benchmarks/gpu_stage.py train) travels once per machine; benchmarks/gpu_prelude.sh keeps it in /tmp/sst.
# The tree (12.7 MiB with three bundled weights) + a state (14.6 MiB) + all the data is 66.5 MiB, too much for
# one call: once a state is committed, carry .gpu/train291/bsd200 in a first call that runs only the prelude,
# then .gpu/train291/t91 with the stretch (the prelude merges both into /tmp/sst/train291).
# A file comes back only under 16 MiB: the state (~15 MB) does; the weights are saved as float16.
# Environment: TRAIN_DATA (/tmp/sst/train291), RUN_DIR (/tmp/sst/run), EVAL_ROOT (/tmp/sst/eval),
# STRETCH_S (480), ITERS_X2 (200000), ITERS_X3 and ITERS_X4 (100000), BATCH (64), COMPILE (0; 1 adds --compile).
set -u
phase=${1:?usage: train_default.sh stretch|eval SCALE OUTDIR}
scale=${2:?usage: train_default.sh stretch|eval SCALE OUTDIR}
out=${3:?usage: train_default.sh stretch|eval SCALE OUTDIR}
cd "$(dirname "$0")/.."
data=${TRAIN_DATA:-/tmp/sst/train291}
run=${RUN_DIR:-/tmp/sst/run}
states=${STATE_DIR:-weights/train-state}
evalroot=${EVAL_ROOT:-/tmp/sst/eval}
mkdir -p "$out" "$run" "$states"
export PYTHONUNBUFFERED=1
weights="$run/sst-light-291_x$scale.safetensors"
state="$states/sst-light-291_x$scale.state.pth"

case $phase in
stretch)
  iters_var="ITERS_X$scale"
  iters=${!iters_var:-$([ "$scale" = 2 ] && echo 200000 || echo 100000)}
  args=(--model sst-light-291 --scale "$scale" --data "$data" --iters "$iters" --batch "${BATCH:-64}" --half
    --out "$weights" --time-limit "$(python3 -c "print(${STRETCH_S:-480} / 60)")" --checkpoint-every 120
    --log-every 30)
  [ "${COMPILE:-0}" = 1 ] && args+=(--compile)
  if [ -f "$state" ]; then
    args+=(--resume "$state")
  else
    args+=(--state "$state" --overwrite)
    if [ "$scale" != 2 ]; then
      init="$states/sst-light-291_x2.state.pth"
      [ -f "$init" ] || init=weights/sst-light-291_x2.safetensors
      [ -f "$init" ] || { echo "x$scale starts from x2: train x2 first (no $init)"; exit 2; }
      args+=(--init "$init")
    fi
  fi
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 5 >"$out/gpu_util.csv" &
  sampler=$!
  sst train "${args[@]}" 2>&1 | tee "$out/train_x$scale.log"
  status=${PIPESTATUS[0]}
  kill $sampler 2>/dev/null
  cp "$state" "$out/"
  [ -f "$weights" ] && cp "$weights" "$out/"
  ls -la "$state"
  ;;
eval)
  sst eval --weights "$weights" -d Set5 -d Set14 -d B100 -s "$scale" --data-root "$evalroot" --device cuda \
    --precision fp32 --attention math --json "$out/eval_x$scale.json" --overwrite 2>&1 | tee "$out/eval_x$scale.log"
  status=${PIPESTATUS[0]}
  ;;
*)
  echo "unknown phase $phase: stretch or eval"
  exit 2
  ;;
esac
# Back through the device tool (at most 8 files): the state and weights as they are, the text in one archive.
(cd "$out" && tar czf "logs_x$scale.tgz" --remove-files -- *.log *.csv *.json 2>/dev/null)
ls -la "$out"
exit "$status"
