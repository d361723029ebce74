#!/usr/bin/env python3
"""mk-gen-lora - write a PEFT-style LoRA adapter (adapter_config.json and
adapter_model.safetensors) for a model's single model.safetensors, with
deterministic values, Python's standard library only.  For the CLI tests
(test/cli/lora.sh); the conformance adapters are made by PEFT itself
(scripts/conformance).

  mk-gen-lora.py BASE OUT [--r R] [--alpha A] [--rslora] [--targets a,b]
                 [--rank-pattern KEY=R]... [--alpha-pattern KEY=A]...
                 [--fan-in-fan-out] [--save m1,m2] [--dtype F32|BF16]
                 [--seed N] [--scale S]
                 [--peft-type T] [--dora] [--bias B] [--lora-bias] [--conv]
                 [--bad-rank] [--bad-shape] [--stray]

Every 2-dimensional weight MODULE.weight of BASE whose module's last part
is in --targets gets lora_A [r, in] and lora_B [out, r] (an embedding,
named *embed_tokens*, lora_embedding_A [r, rows] and lora_embedding_B
[cols, r]; --fan-in-fan-out: W is taken as [in, out]); r and alpha per
module by PEFT's pattern rule (the first key K for which the module name
matches (.*\\.)?(K)$).  --save: those modules' weights saved whole
(modules_to_save), random.  The refusal options make what mk must refuse:
--peft-type, --dora (and a lora_magnitude_vector), --bias, --lora-bias (a
lora_B.bias), --conv (a 4-dimensional lora_A), --bad-rank (r in the config
is not the tensors'), --bad-shape (one lora_B one row short), --stray (a
tensor of a module the base does not have).
"""
import argparse, json, os, re, struct, sys


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


def bf16_bits(x):
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    return (b + 0x7FFF + ((b >> 16) & 1)) >> 16


def write_st(path, tensors, dtype):
    """tensors: list of (name, shape, values) in order."""
    es = 4 if dtype == "F32" else 2
    header, off = {}, 0
    for name, shape, vals in tensors:
        n = len(vals) * es
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt"}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for _, _, vals in tensors:
            if dtype == "F32":
                f.write(struct.pack("<%df" % len(vals), *vals))
            else:
                f.write(struct.pack("<%dH" % len(vals), *(bf16_bits(v) for v in vals)))


class Rng:
    def __init__(self, seed):
        self.s = (seed * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)

    def vals(self, n, scale):
        out = []
        for _ in range(n):
            self.s = (self.s * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
            out.append(((self.s >> 40) / float(1 << 24) - 0.5) * 2 * scale)
        return out


def pattern(pat, module, default):
    for k, v in pat.items():
        if re.match(r"(.*\.)?(%s)$" % k, module):
            return v
    return default


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("out")
    ap.add_argument("--r", type=int, default=4)
    ap.add_argument("--alpha", type=float, default=8)
    ap.add_argument("--rslora", action="store_true")
    ap.add_argument("--targets", default="q_proj,v_proj")
    ap.add_argument("--rank-pattern", action="append", default=[])
    ap.add_argument("--alpha-pattern", action="append", default=[])
    ap.add_argument("--fan-in-fan-out", action="store_true")
    ap.add_argument("--save", default="")
    ap.add_argument("--dtype", default="F32", choices=["F32", "BF16"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scale", type=float, default=0.5)
    ap.add_argument("--peft-type", default="LORA")
    ap.add_argument("--dora", action="store_true")
    ap.add_argument("--bias", default="none")
    ap.add_argument("--lora-bias", action="store_true")
    ap.add_argument("--conv", action="store_true")
    ap.add_argument("--bad-rank", action="store_true")
    ap.add_argument("--bad-shape", action="store_true")
    ap.add_argument("--stray", action="store_true")
    a = ap.parse_args()
    rp = {k: int(v) for k, v in (s.split("=", 1) for s in a.rank_pattern)}
    alp = {k: float(v) for k, v in (s.split("=", 1) for s in a.alpha_pattern)}
    targets = [t for t in a.targets.split(",") if t]
    save = [t for t in a.save.split(",") if t]
    h = read_header(os.path.join(a.base, "model.safetensors"))
    rng = Rng(a.seed)
    ts = []
    pre = "base_model.model."
    first = True
    for name in sorted(h):
        shape = h[name]["shape"]
        if not name.endswith(".weight") or len(shape) != 2:
            continue
        module = name[: -len(".weight")]
        last = module.rsplit(".", 1)[-1]
        if last in save:
            ts.append((pre + name, shape, rng.vals(shape[0] * shape[1], a.scale)))
            continue
        if last not in targets:
            continue
        r = pattern(rp, module, a.r)
        emb = "embed_tokens" in module
        if emb:
            an, bn = ".lora_embedding_A", ".lora_embedding_B"
            ash, bsh = [r, shape[0]], [shape[1], r]
        elif a.fan_in_fan_out:
            an, bn = ".lora_A.weight", ".lora_B.weight"
            ash, bsh = [r, shape[0]], [shape[1], r]
        else:
            an, bn = ".lora_A.weight", ".lora_B.weight"
            ash, bsh = [r, shape[1]], [shape[0], r]
        if a.bad_shape and first:
            bsh = [bsh[0] - 1, r]
        if a.conv and first:
            ash = ash + [1, 1]
        ts.append((pre + module + an, ash, rng.vals(eval("*".join(map(str, ash))), a.scale)))
        ts.append((pre + module + bn, bsh, rng.vals(bsh[0] * bsh[1], a.scale)))
        if a.dora and first:
            ts.append((pre + module + ".lora_magnitude_vector", [shape[0]], rng.vals(shape[0], 1.0)))
        if a.lora_bias and first:
            ts.append((pre + module + ".lora_B.bias", [bsh[0]], rng.vals(bsh[0], 1.0)))
        first = False
    if a.stray:
        ts.append((pre + "model.layers.99.self_attn.q_proj.lora_A.weight", [a.r, 4], rng.vals(4 * a.r, 1.0)))
        ts.append((pre + "model.layers.99.self_attn.q_proj.lora_B.weight", [4, a.r], rng.vals(4 * a.r, 1.0)))
    if not ts:
        sys.exit("mk-gen-lora: no weight of %s matches --targets %s" % (a.base, a.targets))
    os.makedirs(a.out, exist_ok=True)
    write_st(os.path.join(a.out, "adapter_model.safetensors"), ts, a.dtype)
    cfg = {
        "peft_type": a.peft_type, "r": a.r + (1 if a.bad_rank else 0), "lora_alpha": a.alpha,
        "use_rslora": a.rslora, "target_modules": targets, "fan_in_fan_out": a.fan_in_fan_out,
        "rank_pattern": rp, "alpha_pattern": alp, "modules_to_save": save or None,
        "use_dora": a.dora, "bias": a.bias, "lora_bias": a.lora_bias, "lora_dropout": 0.0,
        "layers_to_transform": None, "base_model_name_or_path": a.base, "task_type": "CAUSAL_LM",
    }
    with open(os.path.join(a.out, "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


main()
