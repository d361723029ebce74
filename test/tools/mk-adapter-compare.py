#!/usr/bin/env python3
"""mk-adapter-compare - compare a LoRA adapter mk-extract-lora wrote with
another (mergekit-extract-lora's), independently of mk (Python's standard
library, in double precision):

  mk-adapter-compare.py GOT REF [--tol T] [--bf16-tol T16] [--order]

adapter_config.json: r, lora_alpha, rank_pattern, alpha_pattern equal;
target_modules and modules_to_save equal as sets (--order: modules_to_save
in the same order too); every other key of REF's equal, except
base_model_name_or_path (a path) and a lora_bias GOT adds where it writes
lora_B.bias tensors and no embedding's LoRA (PEFT refuses it there).  adapter_model.safetensors: the same tensor names,
dtypes and shapes; per LoRA module the product B·A (the factors alone may
differ by signs) within relative Frobenius error T (default 1e-4) of REF's
when its factors are float32, T16 (default 2^-7, bfloat16's
rounding of both factors) when bfloat16; every other tensor (modules
saved whole, bias changes) equal to REF's bytes.  Prints one line per
case; exit 1 on a difference.
"""
import json, math, struct, sys


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    h.pop("__metadata__", None)
    out = {}
    for k, v in h.items():
        b, e = v["data_offsets"]
        out[k] = (v["dtype"], tuple(v["shape"]), data[b:e])
    return out


def values(t):
    dt, shape, raw = t
    if dt == "F32":
        return list(struct.unpack("<%df" % (len(raw) // 4), raw))
    if dt == "BF16":
        return [struct.unpack("<f", struct.pack("<I", x << 16))[0]
                for x in struct.unpack("<%dH" % (len(raw) // 2), raw)]
    if dt == "F16":
        return list(struct.unpack("<%de" % (len(raw) // 2), raw))
    raise SystemExit("unsupported dtype %s" % dt)


def product(b, a):
    """B [m, r] times A [r, n] as a flat m*n list"""
    (m, r), (r2, n) = b[1], a[1]
    assert r == r2
    bv, av = values(b), values(a)
    out = [0.0] * (m * n)
    for i in range(m):
        row = bv[i * r:(i + 1) * r]
        for k in range(r):
            c = row[k]
            if c:
                ak = av[k * n:(k + 1) * n]
                base = i * n
                for j in range(n):
                    out[base + j] += c * ak[j]
    return out


def main():
    args = sys.argv[1:]
    tol, tol16, order = 1e-4, 2.0 ** -7, False
    if "--tol" in args:
        i = args.index("--tol"); tol = float(args[i + 1]); del args[i:i + 2]
    if "--bf16-tol" in args:
        i = args.index("--bf16-tol"); tol16 = float(args[i + 1]); del args[i:i + 2]
    if "--order" in args:
        args.remove("--order"); order = True
    got_dir, ref_dir = args
    bad = []
    gc = json.load(open(got_dir + "/adapter_config.json"))
    rc = json.load(open(ref_dir + "/adapter_config.json"))
    for k in rc:
        if k in ("base_model_name_or_path",):
            continue
        if k in ("target_modules", "modules_to_save"):
            if set(gc.get(k) or []) != set(rc[k] or []):
                bad.append("%s: %s, reference %s" % (k, gc.get(k), rc[k]))
        elif gc.get(k) != rc[k]:
            bad.append("%s: %r, reference %r" % (k, gc.get(k), rc[k]))
    if order and gc.get("modules_to_save") != rc.get("modules_to_save"):
        bad.append("modules_to_save order: %s, reference %s" % (gc.get("modules_to_save"), rc.get("modules_to_save")))
    extra = set(gc) - set(rc)
    g = load(got_dir + "/adapter_model.safetensors")
    r = load(ref_dir + "/adapter_model.safetensors")
    # lora_bias where lora_B.bias is written, except beside an embedding's
    # LoRA (PEFT refuses lora_bias there)
    want_bias = any(k.endswith(".lora_B.bias") for k in g) and not any("lora_embedding_" in k for k in g)
    if extra - ({"lora_bias"} if want_bias else set()) or (want_bias and gc.get("lora_bias") is not True):
        bad.append("adapter_config.json: keys %s beyond the reference's, lora_bias %r" % (sorted(extra), gc.get("lora_bias")))
    if set(g) != set(r):
        bad.append("tensors: only in GOT %s, only in REF %s" % (sorted(set(g) - set(r))[:5], sorted(set(r) - set(g))[:5]))
    worst, nmod = 0.0, 0
    for k in sorted(set(g) & set(r)):
        if g[k][:2] != r[k][:2]:
            bad.append("%s: %s %s, reference %s %s" % (k, g[k][0], g[k][1], r[k][0], r[k][1]))
            continue
        if "lora_A" in k or "lora_embedding_A" in k:
            kb = k.replace("lora_A", "lora_B").replace("lora_embedding_A", "lora_embedding_B")
            if kb not in g or kb not in r or g[kb][:2] != r[kb][:2]:
                continue
            pg, pr = product(g[kb], g[k]), product(r[kb], r[k])
            num = math.sqrt(sum((x - y) ** 2 for x, y in zip(pg, pr)))
            den = math.sqrt(sum(y * y for y in pr))
            rel = num / den if den else num
            lim = tol16 if g[k][0] == "BF16" else tol
            worst = max(worst, rel)
            nmod += 1
            if rel > lim:
                bad.append("%s: B·A relative error %.3g > %.3g" % (k, rel, lim))
        elif "lora_B" in k and not k.endswith(".lora_B.bias") or "lora_embedding_B" in k:
            continue
        elif g[k][2] != r[k][2]:
            gv, rv = values(g[k]), values(r[k])
            d = max(abs(x - y) for x, y in zip(gv, rv)) if gv else 0.0
            bad.append("%s: differs (max |diff| %.3g)" % (k, d))
    print("%d tensors, %d modules, worst B·A relative error %.3g" % (len(r), nmod, worst))
    if bad:
        print("\n".join(bad), file=sys.stderr)
        sys.exit(1)


main()
