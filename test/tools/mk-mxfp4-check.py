#!/usr/bin/env python3
"""mk-mxfp4-check.py QUANT PLAIN - check a model mk-pack --quantize mxfp4
wrote (directory QUANT) against the same merge written unquantized
(directory PLAIN), in Python's standard library alone, bit for bit:

  every NAME_blocks (U8 [E, R, C/32, 16]) with NAME_scales (U8
  [E, R, C/32]) of QUANT is PLAIN's NAME [E, C, R] quantized by the rule
  of transformers' Mxfp4 quantizer: values rounded to bfloat16 first;
  per 32 values along C, d = amax / 6 in float32 and the scale 2^k the
  least power of two >= d (the stored byte k + 127); each value over 2^k
  given the FP4 magnitude (0, .5, 1, 1.5, 2, 3, 4, 6) whose threshold
  (.25, .75, 1.25, 1.75, 2.5, 3.5, 5) it reaches, with its sign; two
  codes a byte, the even element low; every other tensor of QUANT has
  PLAIN's bytes; QUANT has no other.

Written apart from mk's C code (thresholds and frexp, where mk works on
float bits), so that a fault in either shows.  Prints a line of counts;
exits 1 on a difference."""
import math
import struct
import sys

from mk_st import load

THRESH = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16_round(u):
    """float32 bits to the bits of the nearest bfloat16 (ties to even)."""
    if (u & 0x7F800000) == 0x7F800000 and u & 0x7FFFFF:
        return (u | 0x400000) & 0xFFFF0000
    return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000) & 0xFFFFFFFF


def floats_bf16(dt, raw):
    if dt == "BF16":
        h = struct.unpack("<%dH" % (len(raw) // 2), raw)
        u = [x << 16 for x in h]
    elif dt == "F32":
        u = [bf16_round(x) for x in struct.unpack("<%dI" % (len(raw) // 4), raw)]
    else:
        raise SystemExit("unsupported dtype " + dt)
    return list(struct.unpack("<%df" % len(u), struct.pack("<%dI" % len(u), *u)))


def code(q):
    a, t = abs(q), 0
    while t < 7 and a >= THRESH[t]:
        t += 1
    return t | (8 if math.copysign(1.0, q) < 0 else 0)


def quantize(v, shape):
    E, C, R = shape
    G = C // 32
    blocks = bytearray(E * R * G * 16)
    scales = bytearray(E * R * G)
    for e in range(E):
        for r in range(R):
            for g in range(G):
                grp = [v[(e * C + g * 32 + j) * R + r] for j in range(32)]
                d = f32(max(abs(x) for x in grp) / 6.0)
                if d == 0:
                    k, mult = None, 0.0
                else:
                    m, ex = math.frexp(d)            # d = m 2^ex, m in [0.5, 1)
                    k = max(ex - 1 if m == 0.5 else ex, -126)
                    mult = 2.0 ** -k
                at = (e * R + r) * G + g
                scales[at] = 0 if k is None else k + 127
                cs = [code(f32(x * mult)) for x in grp]
                for j in range(16):
                    blocks[at * 16 + j] = cs[2 * j] | cs[2 * j + 1] << 4
    return bytes(blocks), bytes(scales)


def main():
    Q, P = load(sys.argv[1]), load(sys.argv[2])
    nq = ns = 0
    bad, seen = [], set()
    for name, (dt, shape, raw) in sorted(P.items()):
        bn, sn = name + "_blocks", name + "_scales"
        if bn in Q and sn in Q:
            seen |= {bn, sn}
            want_b, want_s = quantize(floats_bf16(dt, raw), shape)
            E, C, R = shape
            if Q[bn][:2] != ("U8", [E, R, C // 32, 16]) or Q[sn][:2] != ("U8", [E, R, C // 32]):
                bad.append("%s: dtypes or shapes %s %s" % (name, Q[bn][:2], Q[sn][:2]))
            elif Q[bn][2] != want_b:
                n = sum(1 for a, b in zip(Q[bn][2], want_b) if a != b)
                bad.append("%s: %d of %d code bytes differ" % (bn, n, len(want_b)))
            elif Q[sn][2] != want_s:
                n = sum(1 for a, b in zip(Q[sn][2], want_s) if a != b)
                bad.append("%s: %d of %d scales differ" % (sn, n, len(want_s)))
            nq += 1
        elif name not in Q:
            bad.append("%s: missing" % name)
        else:
            seen.add(name)
            if Q[name] != (dt, shape, raw):
                bad.append("%s: differs from the plain merge" % name)
            else:
                ns += 1
    bad += ["%s: not in the plain merge" % n for n in sorted(set(Q) - seen)]
    print("mk-mxfp4-check: %d tensors quantized bit for bit, %d as the plain merge, %d faults" % (nq, ns, len(bad)))
    for b in bad:
        print("  " + b)
    sys.exit(1 if bad else 0)


main()
