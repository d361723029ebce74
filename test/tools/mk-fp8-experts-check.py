#!/usr/bin/env python3
"""mk-fp8-experts-check.py OUT MODEL [MODEL ...] - check a merge mk wrote
(directory OUT, float32) of block-FP8 models whose experts are stored one
by one (MODEL: mk-gen-arch --unfused E --quantized fp8), in Python's
standard library alone:

  each model is dequantized here: every F8_E4M3 tensor NAME times
  NAME_scale_inv[r // BR][c // BC] (BR x BC from its config.json's
  weight_block_size), in float32; then the per-expert weights are put
  together as transformers v5 holds them, mlp.experts.gate_up_proj[e] the
  rows of experts.e.gate_proj then experts.e.up_proj, down_proj[e]
  experts.e.down_proj; OUT must hold the mean of the models' tensors
  (one model: its tensors bit for bit; more: within float32 1e-6
  relative to the largest magnitude of the tensor), and no other.

Written apart from mk's C code (its own E4M3 decoding, its own indexing
of blocks and experts), so that a fault in either shows.  Prints a line
of counts; exits 1 on a difference."""
import json
import os
import re
import struct
import sys

from mk_st import load


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def e4m3(b):
    s = -1.0 if b & 0x80 else 1.0
    e, m = (b >> 3) & 15, b & 7
    if e == 15 and m == 7:
        return float("nan")
    if e == 0:
        return s * m / 8.0 * 2.0 ** -6
    return s * (1 + m / 8.0) * 2.0 ** (e - 7)


def floats(dt, raw):
    if dt == "F32":
        return list(struct.unpack("<%df" % (len(raw) // 4), raw))
    sys.exit("mk-fp8-experts-check: unexpected dtype %s" % dt)


def dequant(d):
    with open(os.path.join(d, "config.json")) as fh:
        br, bc = json.load(fh)["quantization_config"]["weight_block_size"]
    ts = load(d)
    out = {}
    for k, (dt, shape, raw) in ts.items():
        if k.endswith("_scale_inv"):
            continue
        if dt != "F8_E4M3":
            out[k] = (shape, floats(dt, raw))
            continue
        sdt, sshape, sraw = ts[k + "_scale_inv"]
        sc = floats(sdt, sraw)
        rows, cols = shape
        scols = sshape[1]
        assert sshape == [-(-rows // br), -(-cols // bc)], k
        out[k] = (shape, [f32(e4m3(raw[r * cols + c]) * sc[(r // br) * scols + c // bc])
                          for r in range(rows) for c in range(cols)])
    # the experts as transformers v5 holds them
    fused = {}
    pat = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
    for k in sorted(out):
        m = pat.match(k)
        if m:
            fused.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = out.pop(k)
    for stem, parts in fused.items():
        ne = 1 + max(e for e, _ in parts)
        gu, dn = [], []
        for e in range(ne):
            gu += parts[(e, "gate_proj")][1] + parts[(e, "up_proj")][1]
            dn += parts[(e, "down_proj")][1]
        g0, d0 = parts[(0, "gate_proj")][0], parts[(0, "down_proj")][0]
        out[stem + ".gate_up_proj"] = ([ne, 2 * g0[0], g0[1]], gu)
        out[stem + ".down_proj"] = ([ne, d0[0], d0[1]], dn)
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    got = load(sys.argv[1])
    models = [dequant(d) for d in sys.argv[2:]]
    bad = exact = near = 0
    for k in sorted(set(got) | set(models[0])):
        if k not in got or k not in models[0]:
            print("%s: in %s only" % (k, "the output" if k in got else "the models"))
            bad += 1
            continue
        dt, shape, raw = got[k]
        have = floats(dt, raw)
        want_shape = models[0][k][0]
        if shape != want_shape:
            print("%s: shape %s, expected %s" % (k, shape, want_shape))
            bad += 1
            continue
        vals = [m[k][1] for m in models]
        want = [sum(v[i] for v in vals) / len(vals) for i in range(len(have))]
        if len(models) == 1:
            diff = [i for i in range(len(have)) if struct.pack("<f", have[i]) != struct.pack("<f", want[i])]
            exact += 1
        else:
            top = max(abs(x) for x in want) or 1.0
            diff = [i for i in range(len(have)) if abs(have[i] - want[i]) > 1e-6 * top]
            near += 1
        if diff:
            i = diff[0]
            print("%s: %d elements differ; element %d is %r, expected %r" % (k, len(diff), i, have[i], want[i]))
            bad += 1
    print("mk-fp8-experts-check: %d tensors bit for bit, %d within 1e-6, %d differ" % (exact, near, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
