"""The authors' SST-light training recipe (their ``options/train/SSTlight_DFLIP_X{2,3,4}.yaml``), as data.

Kept free of heavy imports: ``sst train --help`` shows these defaults without importing torch.
"""

from __future__ import annotations

# The schedule is given as fractions of the run.
LR_SCRATCH = 5e-4
LR_FROM_INIT = 2.5e-4  # x3 from x2 and x4 from x3 weights
BETAS = (0.9, 0.9)
WEIGHT_DECAY = 0.0
MILESTONES = (0.5, 0.8, 0.9, 0.95, 0.98)  # 250k, 400k, 450k, 475k, 490k of 500k iterations
LR_GAMMA = 0.5
WARMUP_FRACTION = 0.04  # 20k of 500k iterations
EMA_DECAY = 0.999
PATCH = 64  # LR pixels: HR crops are 128 / 192 / 256 at x2 / x3 / x4, as in the paper
BATCH_CUDA = 16  # per GPU in the authors' runs (4 GPUs, so 64 in all)
BATCH_CPU = 4
CHECKPOINT_EVERY = 300.0
MAX_ITERS = 10**9  # 2000 times the authors' 500k: more is a typo (the lr schedule and the ETA lose their meaning)


def milestones(iters: int) -> list[int]:
    """The iterations after which the lr is halved: MILESTONES of the run, rounded, and never before the first
    step (``--iters 1`` rounded 0.5 to 0 and started at half the lr)."""
    return [max(1, round(m * iters)) for m in MILESTONES]
