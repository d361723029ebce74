#!/usr/bin/env python3
"""quant-golden.py - the goldens of test/cli/quant.sh (testdata/quant/),
made with transformers and mergekit in the reference venv, outside
`make check`:

  ~/.cache/mk/mergekit-0.1.5-venv/bin/python scripts/quant-golden.py \
      build/tools/mk-gen-model testdata/quant

Three small llama-shaped models are generated with every layer matrix in
block FP8 (mk-gen-model --quantized fp8, the options in GEN below); the
script checks that mk-gen-model's quantizer is transformers' (Fp8Quantize
on the same values unquantized gives the same bytes and scales), loads
each with transformers (FineGrainedFP8Config(dequantize=True)) and saves
the dequantized copy: dequant-a/ is the golden of mk's dequantization.
mergekit-yaml then merges the dequantized copies (seeds 1, 2, 3) with each CASE.yml
here: merge-CASE/ are the goldens of mk's merges of the FP8 models.
(ties at density 1: FP8 values repeat, and a magnitude cut at density < 1
would fall among equal magnitudes, where mk and torch may keep others.)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, FineGrainedFP8Config

GEN = ["--dtype", "BF16", "--hidden", "64", "--inter", "96", "--layers", "1", "--vocab", "16",
       "--heads", "4", "--kv-heads", "2", "--quant-block", "32"]
CASES = ["linear-f32", "ties-f32", "slerp-bf16"]


def gen(tool, out, seed, quant):
    subprocess.run([tool] + GEN + ["--seed", str(seed)] + (["--quantized", "fp8"] if quant else []) + [out],
                   check=True)


def dequantize(src, dst):
    m = AutoModelForCausalLM.from_pretrained(src, quantization_config=FineGrainedFP8Config(dequantize=True))
    os.makedirs(dst, exist_ok=True)
    sd = {k: v.contiguous() for k, v in m.state_dict().items()}
    save_file(sd, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg.pop("quantization_config", None)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def check_quantizer(qdir, plain):
    from transformers.integrations.finegrained_fp8 import Fp8Quantize

    class Q:
        class quantization_config:
            weight_block_size = [32, 32]
            scale_fmt = None
    op = Fp8Quantize(Q)
    q = load_file(os.path.join(qdir, "model.safetensors"))
    p = load_file(os.path.join(plain, "model.safetensors"))
    n = 0
    for k, v in q.items():
        if v.dtype != torch.float8_e4m3fn:
            continue
        r = op._quantize_one(k, p[k])
        if not torch.equal(r[k].view(torch.uint8), v.view(torch.uint8)) or \
           not torch.equal(r[k + "_scale_inv"], q[k + "_scale_inv"]):
            sys.exit(f"mk-gen-model's quantizer differs from transformers' on {k}")
        n += 1
    print(f"mk-gen-model's FP8 quantizer: {n} weights as transformers' Fp8Quantize, bit for bit")


def main():
    tool, out = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    cases = os.path.join(os.path.dirname(here), "testdata", "quant")
    venv_bin = os.path.dirname(sys.executable)
    with tempfile.TemporaryDirectory() as w:
        for name, seed in (("a", 1), ("b", 2), ("c", 3)):
            gen(tool, os.path.join(w, name), seed, True)
            gen(tool, os.path.join(w, name + "-plain"), seed, False)
            check_quantizer(os.path.join(w, name), os.path.join(w, name + "-plain"))
            dequantize(os.path.join(w, name), os.path.join(w, name + "-dq"))
        d = os.path.join(out, "dequant-a")
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(w, "a-dq", "model.safetensors"), d)
        for c in CASES:
            with open(os.path.join(cases, c + ".yml")) as f:
                y = (f.read().replace("MODEL_A", os.path.join(w, "a-dq")).replace("MODEL_B", os.path.join(w, "b-dq"))
                 .replace("MODEL_C", os.path.join(w, "c-dq")))
            yp = os.path.join(w, c + ".yml")
            with open(yp, "w") as f:
                f.write(y)
            mo = os.path.join(w, "out-" + c)
            subprocess.run([os.path.join(venv_bin, "mergekit-yaml"), yp, mo], check=True)
            d = os.path.join(out, "merge-" + c)
            os.makedirs(d, exist_ok=True)
            shutil.copy(os.path.join(mo, "model.safetensors"), d)
            print("golden", d)


if __name__ == "__main__":
    main()
