#!/usr/bin/env python3
"""requant-conformance.py - mk-yaml --quantize against transformers, in
the reference venv, outside `make check`:

  ~/.cache/mk/mergekit-0.1.5-venv/bin/python scripts/requant-conformance.py build

Two llama-shaped models are generated with every layer matrix block FP8
(mk-gen-model --quantized fp8: 128x128 blocks, and 32x32 ones on a
smaller model), merged by mk-yaml twice, plainly (BF16 or F32, the FP8
weights read dequantized) and with --quantize fp8.  Then:

  1. transformers' own quantizer (Fp8Quantize, what FineGrainedFP8
     applies when it quantizes a model) run on the plain merge gives
     mk's F8_E4M3 bytes and weight_scale_inv, bit for bit;
  2. AutoModelForCausalLM loads the re-quantized output on the CPU with
     FineGrainedFP8Config(dequantize=True), and every weight it gives
     is within FP8 rounding of the plain merge: per element
     |w - plain| <= 2^-4 |plain| + 2^-10 s (E4M3's half step, relative,
     and its subnormals' half step, times the block's scale s), plus
     BF16's rounding of the result; the other tensors are the plain
     merge's exactly.
  3. the same two checks for qwen3_moe models whose block-FP8 experts
     are stored one by one, fused in mk's output (their NAME_scale_inv
     over [E, rows, cols]), and the model generates;
  4. the DeepSeek-V3 models of testdata/quant-ds: loaded and generated
     the same way (every tensor within FP8 rounding);
  5. gpt-oss MXFP4 models merged with --quantize mxfp4 (float32 and
     BF16 merges): transformers loads the output with
     Mxfp4Config(dequantize=True), every expert value within one step of
     its group's scale of the plain merge (FP4's steps are at most 2
     apart), the other tensors exact, and it generates.
The numbers (largest error, its ratio to the bound) are printed; exit 1
on a failure.
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, FineGrainedFP8Config


def run(*a):
    subprocess.run([str(x) for x in a], check=True)


def check(build, w, name, gen, block, dtype):
    tool = os.path.join(build, "tools", "mk-gen-model")
    yaml = os.path.join(build, "bin", "mk-yaml")
    a, b = os.path.join(w, name + "-a"), os.path.join(w, name + "-b")
    run(tool, *gen, "--quant-block", block, "--seed", 1, "--quantized", "fp8", a)
    run(tool, *gen, "--quant-block", block, "--seed", 2, "--quantized", "fp8", b)
    y = os.path.join(w, name + ".yml")
    with open(y, "w") as f:
        f.write(f"merge_method: linear\nmodels:\n  - model: {a}\n    parameters: {{weight: 0.3}}\n"
                f"  - model: {b}\n    parameters: {{weight: 0.7}}\ndtype: {dtype}\n")
    plain, quant = os.path.join(w, name + "-plain"), os.path.join(w, name + "-q")
    run(yaml, "--quiet", y, plain)
    run(yaml, "--quiet", "--quantize", "fp8", y, quant)
    p = load_file(os.path.join(plain, "model.safetensors"))
    q = load_file(os.path.join(quant, "model.safetensors"))
    with open(os.path.join(quant, "config.json")) as f:
        qc = json.load(f)["quantization_config"]
    with open(os.path.join(a, "config.json")) as f:
        assert qc == json.load(f)["quantization_config"], "config.json's quantization_config differs"

    # 1. transformers' quantizer on the plain merge
    from transformers.integrations.finegrained_fp8 import Fp8Quantize

    class Q:
        class quantization_config:
            weight_block_size = qc["weight_block_size"]
            scale_fmt = None
    op = Fp8Quantize(Q)
    nq = 0
    for k, v in q.items():
        if v.dtype != torch.float8_e4m3fn:
            continue
        r = op._quantize_one(k, p[k])
        if not torch.equal(r[k].view(torch.uint8), v.view(torch.uint8)):
            n = int((r[k].view(torch.uint8) != v.view(torch.uint8)).sum())
            sys.exit(f"{name}: {k}: {n} of {v.numel()} F8 bytes differ from transformers' Fp8Quantize")
        if not torch.equal(r[k + "_scale_inv"], q[k + "_scale_inv"]):
            sys.exit(f"{name}: {k}_scale_inv differs from transformers' Fp8Quantize")
        nq += 1
    print(f"{name}: {nq} weights: mk's F8 bytes and scales are transformers' Fp8Quantize of the plain merge, bit for bit")

    # 2. transformers loads it, dequantized on the CPU
    m = AutoModelForCausalLM.from_pretrained(quant, quantization_config=FineGrainedFP8Config(dequantize=True),
                                             device_map="cpu")
    sd = m.state_dict()
    bs = qc["weight_block_size"]
    worst_abs = worst_ratio = 0.0
    nexact = 0
    for k, pv in p.items():
        if k not in sd:
            if k == "lm_head.weight" and getattr(m.config, "tie_word_embeddings", False):
                continue
            sys.exit(f"{name}: transformers' model has no {k}")
        d = sd[k].float()
        pf = pv.float()
        if k in q and q[k].dtype == torch.float8_e4m3fn:
            s = q[k + "_scale_inv"].float()
            s = s.repeat_interleave(bs[0], 0)[: pf.shape[0]].repeat_interleave(bs[1], 1)[:, : pf.shape[1]]
            bound = 2.0 ** -4 * pf.abs() + 2.0 ** -10 * s
            bound = bound * (1 + 2.0 ** -8) + 2.0 ** -9 * d.abs()   # BF16's rounding of the loaded weight
            err = (d - pf).abs()
            ratio = float((err / bound).max())
            worst_abs = max(worst_abs, float(err.max()))
            worst_ratio = max(worst_ratio, ratio)
            if ratio > 1.0:
                sys.exit(f"{name}: {k}: dequantized by transformers, off the plain merge by more than FP8 rounding "
                         f"(max |err| {float(err.max()):.3g}, {ratio:.3f} of the bound)")
        else:
            if not torch.equal(d, pf.to(sd[k].dtype).float()):
                sys.exit(f"{name}: {k}: transformers loads other values than the plain merge's")
            nexact += 1
    print(f"{name}: transformers (FineGrainedFP8, dequantize=True, CPU) loads it: {nq} FP8 weights within FP8 "
          f"rounding of the plain merge (max |err| {worst_abs:.4g}, at most {worst_ratio:.3f} of the bound), "
          f"{nexact} other tensors exact")


def yml(path, a, b, dtype):
    with open(path, "w") as f:
        f.write(f"merge_method: linear\nmodels:\n  - model: {a}\n    parameters: {{weight: 0.3}}\n"
                f"  - model: {b}\n    parameters: {{weight: 0.7}}\ndtype: {dtype}\n")


def check_fused_fp8(build, w):
    """qwen3_moe models whose 8 experts are stored one by one, block FP8
    (4x4 blocks over 8x8 matrices, the sizes transformers takes): mk's
    fused output with --quantize fp8 is transformers' Fp8Quantize of the
    plain merge's fused experts, and transformers loads it."""
    tool = os.path.join(build, "tools", "mk-gen-arch")
    yaml = os.path.join(build, "bin", "mk-yaml")
    a, b = os.path.join(w, "moe-a"), os.path.join(w, "moe-b")
    for s, d in ((1, a), (2, b)):
        run(tool, "--unfused", 8, "--quantized", "fp8", "--quant-block", 4, "--layers", 2, "--seed", s, "qwen3_moe", d)
        cp = os.path.join(d, "config.json")
        with open(cp) as fh:
            c = json.load(fh)
        c.update(hidden_size=8, intermediate_size=8, moe_intermediate_size=8, num_attention_heads=1,
                 num_key_value_heads=1, head_dim=8, num_experts=8, num_experts_per_tok=2,
                 decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False,
                 max_position_embeddings=64)
        with open(cp, "w") as fh:
            json.dump(c, fh, indent=2)
    y = os.path.join(w, "moe.yml")
    yml(y, a, b, "bfloat16")
    plain, quant = os.path.join(w, "moe-plain"), os.path.join(w, "moe-q")
    run(yaml, "--quiet", y, plain)
    run(yaml, "--quiet", "--quantize", "fp8", y, quant)
    p = load_file(os.path.join(plain, "model.safetensors"))
    q = load_file(os.path.join(quant, "model.safetensors"))
    with open(os.path.join(quant, "config.json")) as f:
        qc = json.load(f)["quantization_config"]
    from transformers.integrations.finegrained_fp8 import Fp8Quantize

    class Q:
        class quantization_config:
            weight_block_size = qc["weight_block_size"]
            scale_fmt = None
    op = Fp8Quantize(Q)
    bs = qc["weight_block_size"]
    # mk writes the fused experts as the donor stores them: per expert,
    # gate_proj / up_proj (gate_up_proj's rows cut in two) and down_proj
    fused = [k for k in p if k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj")]
    scales = {}
    nparts = 0
    for k in fused:
        pre, last = k.rsplit(".", 1)
        parts = ["gate_proj", "up_proj"] if last == "gate_up_proj" else ["down_proj"]
        E, R, C = p[k].shape
        pr = R // len(parts)
        ss = []
        for e in range(E):
            for i, nm in enumerate(parts):
                pn = f"{pre}.{e}.{nm}.weight"
                if pn not in q or q[pn].dtype != torch.float8_e4m3fn:
                    sys.exit(f"fused-fp8: {pn} is not written block FP8")
                r = op._quantize_one(pn, p[k][e, i * pr:(i + 1) * pr].contiguous())
                if not torch.equal(r[pn].view(torch.uint8), q[pn].view(torch.uint8)) or \
                        not torch.equal(r[pn + "_scale_inv"], q[pn + "_scale_inv"]):
                    sys.exit(f"fused-fp8: {pn}: differs from transformers' Fp8Quantize of the plain merge's part")
                ss.append(q[pn + "_scale_inv"].float().repeat_interleave(bs[0], 0).repeat_interleave(bs[1], 1)
                          [:pr, :C])
                nparts += 1
        scales[k] = torch.cat(ss).reshape(E, R, C)
    m = AutoModelForCausalLM.from_pretrained(
        quant, quantization_config=FineGrainedFP8Config(dequantize=True, weight_block_size=tuple(bs)),
        dtype=torch.float32, device_map="cpu")
    sd = m.state_dict()
    worst = 0.0
    for k in fused:
        d, pf, s = sd[k].float(), p[k].float(), scales[k]
        bound = (2.0 ** -4 * pf.abs() + 2.0 ** -10 * s) * (1 + 2.0 ** -8) + 2.0 ** -9 * d.abs()
        ratio = float(((d - pf).abs() / bound).max())
        worst = max(worst, ratio)
        if ratio > 1.0:
            sys.exit(f"fused-fp8: {k}: transformers' dequantization is off the plain merge by {ratio:.3f} of FP8 rounding")
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        out = m.generate(ids, max_new_tokens=4, do_sample=False)
    print(f"fused-fp8: {nparts} per-expert parts of {len(fused)} fused weights are transformers' Fp8Quantize of the "
          f"plain merge's, bit for bit; transformers loads and fuses them within {worst:.3f} of FP8 rounding and "
          f"generates {out.shape[1] - 3} tokens")


def check_deepseek(build, w):
    """The block-FP8 DeepSeek-V3 models of testdata/quant-ds (made and
    quantized by transformers, experts one by one): their linear merge
    with --quantize fp8 loads in transformers (dequantize=True), every
    tensor within FP8 rounding of the plain merge (a looser bound than
    above: the subnormal floor from the tensor's largest magnitude, not
    its block's), and generates."""
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    g = os.path.join(top, "testdata", "quant-ds")
    yaml = os.path.join(build, "bin", "mk-yaml")
    y = os.path.join(w, "ds.yml")
    yml(y, os.path.join(g, "ds-a"), os.path.join(g, "ds-b"), "bfloat16")
    plain, quant = os.path.join(w, "ds-plain"), os.path.join(w, "ds-q")
    run(yaml, "--quiet", y, plain)
    run(yaml, "--quiet", "--quantize", "fp8", y, quant)
    p = load_file(os.path.join(plain, "model.safetensors"))
    q = load_file(os.path.join(quant, "model.safetensors"))
    nf8 = sum(1 for v in q.values() if v.dtype == torch.float8_e4m3fn)
    with open(os.path.join(quant, "config.json")) as f:
        bs = json.load(f)["quantization_config"]["weight_block_size"]
    m = AutoModelForCausalLM.from_pretrained(
        quant, quantization_config=FineGrainedFP8Config(dequantize=True, weight_block_size=tuple(bs)),
        dtype=torch.float32, device_map="cpu")
    sd = m.state_dict()
    if set(sd) != set(p):
        sys.exit(f"deepseek: transformers' tensors differ from the plain merge's: {sorted(set(sd) ^ set(p))[:4]}")
    worst = 0.0
    for k, pv in p.items():
        d, pf = sd[k].float(), pv.float()
        bound = (2.0 ** -4 * pf.abs() + 2.0 ** -10 * float(pf.abs().max()) / 448) * (1 + 2.0 ** -8) + \
            2.0 ** -9 * d.abs()
        ratio = float(((d - pf).abs() / bound).max())
        worst = max(worst, ratio)
        if ratio > 1.0:
            sys.exit(f"deepseek: {k}: transformers' dequantization is off the plain merge by {ratio:.3f} of FP8 rounding")
    with torch.no_grad():
        out = m.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=4, do_sample=False)
    print(f"deepseek: mk's --quantize fp8 merge of two DeepSeek-V3 FP8 models ({nf8} F8 tensors) loads in transformers, "
          f"all {len(p)} tensors within {worst:.3f} of FP8 rounding of the plain merge; generates "
          f"{out.shape[1] - 3} tokens")


def check_mxfp4(build, w, dtype):
    """gpt-oss MXFP4 models: mk's merge with --quantize mxfp4 loads in
    transformers (Mxfp4Config(dequantize=True), CPU), each expert value
    within one step of its group's scale of the plain merge, the rest
    exact, and generates."""
    from transformers import Mxfp4Config
    tool = os.path.join(build, "tools", "mk-gen-model")
    yaml = os.path.join(build, "bin", "mk-yaml")
    gen = ["--arch", "gpt_oss", "--quantized", "mxfp4", "--dtype", "BF16", "--hidden", "128", "--inter", "192",
           "--experts", "4", "--layers", "2", "--vocab", "64", "--heads", "4", "--kv-heads", "2"]
    a, b = os.path.join(w, "mx-a"), os.path.join(w, "mx-b")
    run(tool, *gen, "--seed", 1, a)
    run(tool, *gen, "--seed", 2, b)
    y = os.path.join(w, "mx.yml")
    yml(y, a, b, dtype)
    plain, quant = os.path.join(w, "mx-plain-" + dtype), os.path.join(w, "mx-q-" + dtype)
    run(yaml, "--quiet", y, plain)
    run(yaml, "--quiet", "--quantize", "mxfp4", y, quant)
    p = load_file(os.path.join(plain, "model.safetensors"))
    q = load_file(os.path.join(quant, "model.safetensors"))
    m = AutoModelForCausalLM.from_pretrained(quant, quantization_config=Mxfp4Config(dequantize=True), device_map="cpu")
    sd = m.state_dict()
    nq = nexact = 0
    worst = 0.0
    for k, pv in p.items():
        d, pf = sd[k].float(), pv.float()
        if k + "_scales" in q:
            E, C, R = pf.shape
            step = torch.exp2(q[k + "_scales"].to(torch.float32) - 127)                    # [E, R, C/32]
            step = step.repeat_interleave(32, 2).transpose(1, 2)                            # [E, C, R]
            pb = pf.to(torch.bfloat16).float()
            ratio = float(((d - pb).abs() / step).max())
            worst = max(worst, ratio)
            if ratio > 1.0:
                sys.exit(f"mxfp4-{dtype}: {k}: transformers' dequantization is {ratio:.3f} steps off the plain merge")
            nq += 1
        elif not torch.equal(d, pf.to(sd[k].dtype).float()):
            sys.exit(f"mxfp4-{dtype}: {k}: transformers loads other values than the plain merge's")
        else:
            nexact += 1
    with torch.no_grad():
        out = m.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=4, do_sample=False)
    print(f"mxfp4-{dtype}: transformers (Mxfp4Config(dequantize=True), CPU) loads mk's --quantize mxfp4 output: {nq} "
          f"expert weights within {worst:.3f} of a step of their groups' scale, {nexact} other tensors exact; "
          f"generates {out.shape[1] - 3} tokens")


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    small = ["--dtype", "BF16", "--hidden", "64", "--inter", "96", "--layers", "1", "--vocab", "16",
             "--heads", "4", "--kv-heads", "2"]
    big = ["--dtype", "BF16", "--hidden", "384", "--inter", "1024", "--layers", "2", "--vocab", "64",
           "--heads", "6", "--kv-heads", "2"]
    with tempfile.TemporaryDirectory() as w:
        check(build, w, "small-32-f32", small, 32, "float32")
        check(build, w, "small-32-bf16", small, 32, "bfloat16")
        check(build, w, "llama-128-bf16", big, 128, "bfloat16")
        check_fused_fp8(build, w)
        check_deepseek(build, w)
        check_mxfp4(build, w, "float32")
        check_mxfp4(build, w, "bfloat16")
    print("requant-conformance: ok")


if __name__ == "__main__":
    main()
