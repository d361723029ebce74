#!/usr/bin/env python3
"""mk-lora-check - check a merged model against W + s*B@A computed here,
independently of mk (Python's standard library, in double precision):

  mk-lora-check.py BASE ADAPTER OUT [--tol T]

Every tensor of BASE/model.safetensors must be in OUT/model.safetensors
with its dtype and shape; a weight the adapter changes (PEFT's rules:
scale lora_alpha/r or /sqrt(r) with use_rslora, rank_pattern and
alpha_pattern by the first key K matching (.*\\.)?(K)$, fan_in_fan_out and
embeddings transposed, modules_to_save and saved base layers replacing the
weight) must equal the expected values, every other tensor the base's
bytes.  The metric: max|out - expected| <= T * max(1, max|expected|) per
tensor (default T: 1e-6 for F32 outputs, 2^-8 (half a bfloat16 ulp at 1,
so one ulp at most) for BF16).  Prints one summary line; exit 1 on a
difference.
"""
import json, math, os, re, struct, sys


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    h.pop("__metadata__", None)
    out = {}
    for k, v in h.items():
        b, e = v["data_offsets"]
        raw = data[b:e]
        if v["dtype"] == "F32":
            vals = list(struct.unpack("<%df" % (len(raw) // 4), raw))
        elif v["dtype"] == "BF16":
            vals = [struct.unpack("<f", struct.pack("<I", x << 16))[0]
                    for x in struct.unpack("<%dH" % (len(raw) // 2), raw)]
        else:
            vals = None
        out[k] = (v["dtype"], v["shape"], vals, raw)
    return out


def pattern(pat, module, default):
    for k, v in (pat or {}).items():
        if re.match(r"(.*\.)?(%s)$" % k, module):
            return v
    return default


def main():
    args = sys.argv[1:]
    tol = None
    if "--tol" in args:
        i = args.index("--tol")
        tol = float(args[i + 1])
        del args[i:i + 2]
    base, ad, out = args
    W = load(os.path.join(base, "model.safetensors"))
    A = load(os.path.join(ad, "adapter_model.safetensors"))
    O = load(os.path.join(out, "model.safetensors"))
    cfg = json.load(open(os.path.join(ad, "adapter_config.json")))
    pre = "base_model.model."
    mods, repl = {}, {}
    for k in A:
        rest = k[len(pre):]
        for suf, part, emb in ((".lora_A.weight", "A", False), (".lora_B.weight", "B", False),
                               (".lora_embedding_A", "A", True), (".lora_embedding_B", "B", True)):
            if rest.endswith(suf):
                mods.setdefault(rest[: -len(suf)], {})[part] = A[k]
                mods[rest[: -len(suf)]]["emb"] = emb
                break
        else:
            repl[rest.replace(".base_layer.weight", ".weight")] = A[k]
    worst, changed, bad = 0.0, 0, []
    for name, (dt, shape, vals, raw) in W.items():
        if name not in O or O[name][0] != dt or O[name][1] != shape:
            bad.append(name + " (missing, or another dtype or shape)")
            continue
        module = name[: -len(".weight")] if name.endswith(".weight") else None
        if module not in mods and name not in repl:
            if O[name][3] != raw:
                bad.append(name + " (not adapted, yet changed)")
            continue
        changed += 1
        exp = list(repl[name][2]) if name in repl else list(vals)
        if dt == "BF16" and name in repl:
            exp = [struct.unpack("<f", struct.pack("<I", (struct.unpack("<I", struct.pack("<f", x))[0] + 0x7FFF +
                   ((struct.unpack("<I", struct.pack("<f", x))[0] >> 16) & 1)) >> 16 << 16))[0] for x in exp]
        if module in mods:
            m = mods[module]
            r = pattern(cfg.get("rank_pattern"), module, cfg["r"])
            alpha = pattern(cfg.get("alpha_pattern"), module, cfg["lora_alpha"])
            s = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
            a, b = m["A"][2], m["B"][2]
            ra, ca = m["A"][1]
            rb = m["B"][1][0]
            tr = m["emb"] or cfg.get("fan_in_fan_out")
            rows, cols = shape
            for i in range(rows):
                for j in range(cols):
                    if tr:   # delta[i][j] = sum_k B[j][k] A[k][i]
                        d = sum(b[j * ra + k] * a[k * ca + i] for k in range(ra))
                    else:    # delta[i][j] = sum_k B[i][k] A[k][j]
                        d = sum(b[i * ra + k] * a[k * ca + j] for k in range(ra))
                    exp[i * cols + j] += s * d
        got = O[name][2]
        big = max(1.0, max(abs(x) for x in exp))
        d = max(abs(x - y) for x, y in zip(got, exp)) / big
        worst = max(worst, d)
        t = tol if tol is not None else (1e-6 if dt == "F32" else 2.0 ** -8)
        if d > t:
            bad.append("%s (relative difference %.3g > %g)" % (name, d, t))
    print("mk-lora-check: %d tensors, %d adapted, largest relative difference %.3g" % (len(W), changed, worst))
    if bad:
        print("mk-lora-check: DIFFERS: " + "; ".join(bad[:8]))
        sys.exit(1)
    if not changed:
        sys.exit("mk-lora-check: the adapter changes no tensor")


main()
