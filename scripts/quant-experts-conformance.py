#!/usr/bin/env python3
"""quant-experts-conformance.py - mk's reading of block-FP8 experts stored
one by one against transformers, in the reference venv, outside
`make check`:

  ~/.cache/mk/mergekit-0.1.5-venv/bin/python scripts/quant-experts-conformance.py build

A qwen3_moe model of 8 experts stored one by one, every layer matrix
block FP8 (mk-gen-arch --unfused 8 --quantized fp8, 4x4 blocks over 8x8
matrices: transformers refuses partial blocks when it converts them;
config.json given the sizes transformers needs), is written by mk-yaml's
passthrough (the experts assembled into mlp.experts.gate_up_proj
and down_proj, dequantized to float32); AutoModelForCausalLM loads the FP8
model on the CPU with FineGrainedFP8Config(dequantize=True), and every
tensor of its state dict must equal mk's bit for bit, none missing on
either side.  Prints the counts; exit 1 on a difference.
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, FineGrainedFP8Config


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
    env = dict(os.environ, PATH="%s/bin:%s/tools:%s" % (build, build, os.environ["PATH"]))
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "q"), os.path.join(d, "out")
        subprocess.run(["mk-gen-arch", "--unfused", "8", "--quantized", "fp8", "--quant-block", "4",
                        "--layers", "2", "--seed", "5", "qwen3_moe", src], check=True, env=env)
        cp = os.path.join(src, "config.json")
        with open(cp) as fh:
            c = json.load(fh)
        c.update(hidden_size=8, intermediate_size=8, moe_intermediate_size=8, num_attention_heads=1,
                 num_key_value_heads=1, head_dim=8, num_experts=8, num_experts_per_tok=2,
                 decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False,
                 max_position_embeddings=64)
        with open(cp, "w") as fh:
            json.dump(c, fh, indent=2)
        y = os.path.join(d, "p.yml")
        with open(y, "w") as fh:
            fh.write("merge_method: passthrough\nmodels:\n  - model: %s\n" % src)
        subprocess.run(["mk-yaml", "--quiet", y, out], check=True, env=env)
        m = AutoModelForCausalLM.from_pretrained(
            src, quantization_config=FineGrainedFP8Config(dequantize=True, weight_block_size=(4, 4)),
            dtype=torch.float32, device_map="cpu")
        ref = m.state_dict()
        got = load_file(os.path.join(out, "model.safetensors"))
    bad = 0
    for k in sorted(set(ref) | set(got)):
        if k not in ref or k not in got:
            print("%s: only in %s" % (k, "mk's" if k in got else "transformers'"))
            bad += 1
        elif ref[k].shape != got[k].shape or not torch.equal(ref[k].to(torch.float32), got[k]):
            print("%s: differs" % k)
            bad += 1
    fused = sum(1 for k in got if k.endswith(("experts.gate_up_proj", "experts.down_proj")))
    print("quant-experts-conformance: %d tensors (%d fused experts) equal, %d differ" % (len(got) - bad, fused, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
