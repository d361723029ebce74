#!/usr/bin/env python3
"""mk-fp8-check.py QUANT PLAIN BR BC - check a model mk-pack --quantize fp8
wrote (directory QUANT) against the same merge written unquantized
(directory PLAIN), in Python's standard library alone, bit for bit:

  every F8_E4M3 tensor NAME of QUANT, with NAME_scale_inv (float32) beside
  it, is PLAIN's NAME quantized by transformers' FineGrainedFP8 rule in
  blocks of BR x BC (over the last two axes): scale k = (1/amax)*448 in
  float32 (the reciprocal rounded, then the product), each value times k
  clamped to [-448, 448] and rounded to nearest even to E4M3, 1/k stored;
  every other tensor of QUANT has PLAIN's bytes; QUANT has no other.

Written apart from mk's C code (its own E4M3 table, its own rounding), so
that a fault in either shows.  Prints a line of counts; exits 1 on a
difference."""
import bisect
import math
import struct
import sys

from mk_st import load


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def floats(dt, raw):
    if dt == "F32":
        return list(struct.unpack("<%df" % (len(raw) // 4), raw))
    if dt == "BF16":
        h = struct.unpack("<%dH" % (len(raw) // 2), raw)
        return list(struct.unpack("<%df" % len(h), struct.pack("<%dI" % len(h), *[x << 16 for x in h])))
    if dt == "F16":
        return list(struct.unpack("<%de" % (len(raw) // 2), raw))
    raise SystemExit("unsupported dtype " + dt)


# E4M3 (fn): bias 7, 3 mantissa bits, no infinities, 0x7f NaN; the
# non-negative values and their codes, ascending
E4M3 = []
for code in range(0x7F):
    e, m = code >> 3, code & 7
    E4M3.append((m / 8.0 * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7), code))
VALS = [v for v, _ in E4M3]


def e4m3(x):
    a = abs(x)
    i = bisect.bisect_left(VALS, a)
    if i < len(VALS) and VALS[i] == a:
        code = E4M3[i][1]
    else:
        lo, hi = E4M3[i - 1], E4M3[i]
        dl, dh = a - lo[0], hi[0] - a
        code = lo[1] if dl < dh or (dl == dh and lo[1] % 2 == 0) else hi[1]
    return code | (0x80 if math.copysign(1.0, x) < 0 and code else 0)


def quantize(vals, shape, br, bc):
    rows, cols = shape[-2], shape[-1]
    mats = len(vals) // (rows * cols) if rows * cols else 0
    sr, sc = -(-rows // br), -(-cols // bc)
    q = bytearray(len(vals))
    inv = []
    for m in range(mats):
        base = m * rows * cols
        for i in range(sr):
            for j in range(sc):
                idx = [base + r * cols + c for r in range(i * br, min(rows, (i + 1) * br))
                       for c in range(j * bc, min(cols, (j + 1) * bc))]
                amax = max(abs(vals[t]) for t in idx)
                k = f32(f32(1.0 / amax) * 448.0) if amax > 0 else 1.0
                inv.append(f32(1.0 / k))
                for t in idx:
                    x = min(448.0, max(-448.0, f32(vals[t] * k)))
                    q[t] = e4m3(x)
    return bytes(q), struct.pack("<%df" % len(inv), *inv)


def main():
    qd, pd, br, bc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    Q, P = load(qd), load(pd)
    nq = ns = 0
    bad = []
    for name, (dt, shape, raw) in sorted(P.items()):
        if name not in Q:
            bad.append("%s: missing" % name)
            continue
        qdt, qshape, qraw = Q[name]
        sname = name + "_scale_inv"
        if qdt == "F8_E4M3" and sname in Q:
            want_q, want_s = quantize(floats(dt, raw), shape, br, bc)
            sdt, sshape, sraw = Q[sname]
            want_sshape = shape[:-2] + [-(-shape[-2] // br), -(-shape[-1] // bc)]
            if qshape != shape or sdt != "F32" or sshape != want_sshape:
                bad.append("%s: shapes %s %s %s" % (name, qshape, sdt, sshape))
            elif qraw != want_q:
                n = sum(1 for a, b in zip(qraw, want_q) if a != b)
                bad.append("%s: %d of %d F8 bytes differ" % (name, n, len(want_q)))
            elif sraw != want_s:
                bad.append("%s: its scales differ" % sname)
            nq += 1
        elif (qdt, qshape, qraw) != (dt, shape, raw):
            bad.append("%s: differs from the plain merge" % name)
        else:
            ns += 1
    extra = set(Q) - set(P) - {n + "_scale_inv" for n in P if Q.get(n, ("",))[0] == "F8_E4M3"}
    bad += ["%s: not in the plain merge" % n for n in sorted(extra)]
    print("mk-fp8-check: %d tensors quantized bit for bit, %d as the plain merge, %d faults" % (nq, ns, len(bad)))
    for b in bad:
        print("  " + b)
    sys.exit(1 if bad else 0)


main()
