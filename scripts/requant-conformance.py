#!/usr/bin/env python3
"""requant-conformance.py - mk-yaml --quantize fp8 against transformers, in
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
    print("requant-conformance: ok")


if __name__ == "__main__":
    main()
