# Golden LoRA factors for test/unit/test_lowrank.c, made by mergekit 0.1.5's
# own decomposition (TaskVectorDecompositionTask, torch.linalg.svd on the CPU):
#   MERGEKIT_VENV/bin/python scripts/lowrank-golden.py testdata/lowrank
# (run by hand, outside `make check`: it needs mergekit and torch).
# Writes cases.txt, one line per case:
#   NAME M N TRANSPOSE MAX_RANK SV_EPSILON DISTRIBUTE_SCALE RANK
# and NAME.bin: the delta (M x N float32, little-endian, row-major), then
# torch's B @ A (the factored matrix's shape: N x M when TRANSPOSE).
import os, sys
import numpy as np
import torch
from mergekit.scripts.extract_lora import TaskVectorDecompositionTask


def delta(kind, m, n, seed):
    g = np.random.default_rng(seed)
    if kind == "gauss":
        return g.standard_normal((m, n)).astype(np.float32) * 0.02
    # a decaying spectrum, as fine-tune deltas have: s_i = (i + 1)^-0.7
    k = min(m, n)
    u, _ = np.linalg.qr(g.standard_normal((m, k)))
    v, _ = np.linalg.qr(g.standard_normal((n, k)))
    s = (np.arange(k) + 1.0) ** -0.7
    return ((u * s) @ v.T).astype(np.float32)


def decompose(d, max_rank, eps, dist, transpose):
    # execute() is all the task does; its arguments come from the caller
    t = TaskVectorDecompositionTask.model_construct(
        weight_info=None, input_task=None, max_rank=max_rank, distribute_scale=dist,
        transpose=transpose, sv_epsilon=eps)
    a, b = t.execute(torch.from_numpy(d))
    return (b @ a).numpy().astype(np.float32), a.shape[0]


out = sys.argv[1]
cases = [
    ("gauss-wide", "gauss", 24, 40, False, 8, 0.0, True, 1),
    ("gauss-tall", "gauss", 40, 24, False, 8, 0.0, True, 2),
    ("decay-square", "decay", 32, 32, False, 12, 0.0, True, 3),
    ("decay-nodist", "decay", 32, 48, False, 10, 0.0, False, 4),
    ("decay-eps", "decay", 48, 32, False, 30, 0.1, True, 5),
    ("decay-embed", "decay", 36, 20, True, 6, 0.0, True, 6),
    ("decay-full", "decay", 16, 24, False, 64, 0.0, True, 7),
]
lines = []
for name, kind, m, n, tr, r, eps, dist, seed in cases:
    d = delta(kind, m, n, seed)
    ba, rank = decompose(d, r, eps, dist, tr)
    with open(os.path.join(out, name + ".bin"), "wb") as f:
        f.write(d.astype("<f4").tobytes())
        f.write(ba.astype("<f4").tobytes())
    lines.append(f"{name} {m} {n} {int(tr)} {r} {eps} {int(dist)} {rank}")
with open(os.path.join(out, "cases.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
