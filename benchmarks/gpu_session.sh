#!/usr/bin/env bash
# A GPU session as two prepared commands sized to the device tool's limits of 2026-11-26: 15 minutes of device
# time per session (the machine's start, about 1-2 minutes, included), 10 minutes per command, 64 MiB carried,
# 8 files back. Each call runs the prelude and gpu_check.sh's steps for that call, most important first, none
# past SESSION_S, then packs every figure and log into one archive, so the files come back whatever stopped.
#
#   python benchmarks/gpu_stage.py check train video          # here, once: stages .gpu/ (no device time)
#   bash benchmarks/gpu_session.sh first OUTDIR    carry: .gpu/shared/bench .gpu/shared/golden
#                                                         .gpu/train291/t91 .gpu/wheels/video  (~61 MiB with the tree)
#   bash benchmarks/gpu_session.sh second OUTDIR   carry: nothing; at once, on the same warm machine (/tmp/sst
#                                                  and the installed wheels stay while it is warm)
#
# first (~8 min): golden vectors per kernel; where small inputs' time goes (gpu_profile.py: kernels, host time,
# CUDA graphs); the authors' code side by side (Table S4 protocol, issue 25's main figure); `sst upscale` end to
# end, twice, the second under cProfile; training patches/s (issue 29); the fused kernels' correctness.
# second (~5.5 min): --compile by regions (first and second process, compiled ms; SST-L x2 bf16), then the 4K
# --tile auto sweep at x4 (x2 was measured on 2026-11-27). Neither call trains: a stretch
# of a few minutes is ~1% of one scale's schedule (benchmarks/train_default.sh runs one when a session has more).
#
# SESSION_S overrides the seconds a call may take (first 480, second 330): pass timeout_s >= SESSION_S + 60.
# OUTDIR gets <call>.tar.gz (every file gpu_check.sh wrote) and <call>-log.txt (its log, readable at once).
set -u
call=${1:?usage: benchmarks/gpu_session.sh first|second OUTDIR}
out=${2:?usage: benchmarks/gpu_session.sh first|second OUTDIR}
cd "$(dirname "$0")/.."
mkdir -p "$out"
out=$(cd "$out" && pwd)
case $call in
first)
  limit=${SESSION_S:-480}
  steps="env golden profile official e2e probe fused"
  export FUSED_STEPS=units,golden PROBE_S=40
  ;;
second)
  limit=${SESSION_S:-330}
  steps="compile sweep"
  export SWEEP_SCALES=4 SWEEP_TILES="auto 512 1024"
  ;;
*)
  echo "usage: benchmarks/gpu_session.sh first|second OUTDIR" >&2
  exit 2
  ;;
esac
start=$SECONDS
bash benchmarks/gpu_prelude.sh
work=$(mktemp -d)
# the prelude's time counts; 20 s stay for the archive
GPU_CHECK_BUDGET=$((limit - (SECONDS - start) - 20)) bash benchmarks/gpu_check.sh "$work/$call" $steps
tar -czf "$out/$call.tar.gz" -C "$work" "$call"
cp "$work/$call/log.txt" "$out/$call-log.txt"
echo "session $call: $((SECONDS - start)) s; $(du -h "$out/$call.tar.gz" | cut -f1) archived"
