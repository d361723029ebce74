#!/usr/bin/env python3
"""bench-quant-deepseek - peak RSS of each stage of a linear merge of two
block-FP8 models with DeepSeek-V3's real per-layer tensor shapes (MLA
attention, a dense first layer, a MoE layer with routed experts stored one
by one and a shared expert), fewer layers and experts so it fits a small
disk, under --max-memory 2G.  A benchmark, not a test; not in make check.

  ~/.cache/mk/mergekit-0.1.5-venv/bin/python scripts/bench-quant-deepseek.py \\
      [--build build] [--work DIR] [--experts 4] [--mem 2G]

The checkpoints are written here with torch (float8_e4m3fn): every layer
matrix but the router quantized in 128x128 blocks as transformers'
quantizer does (scale = amax / 448 per block, weight_scale_inv stored),
config.json a DeepseekV3ForCausalLM's with the fp8 quantization_config.
Then mk-plan | mk-fetch | mk-merge | mk-pack, each under mk-rss, and one
line per stage.
"""
import argparse, json, math, os, subprocess, sys

import torch
from safetensors.torch import save_file

H, V = 7168, 1024
QL, KVL, NOPE, ROPE, VH, HEADS = 1536, 512, 128, 64, 128, 128
DENSE_I, MOE_I = 18432, 2048


def shapes(experts):
    t = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,), "lm_head.weight": (V, H)}
    for l in range(2):
        p = "model.layers.%d." % l
        t[p + "input_layernorm.weight"] = (H,)
        t[p + "post_attention_layernorm.weight"] = (H,)
        a = p + "self_attn."
        t[a + "q_a_proj.weight"] = (QL, H)
        t[a + "q_a_layernorm.weight"] = (QL,)
        t[a + "q_b_proj.weight"] = (HEADS * (NOPE + ROPE), QL)
        t[a + "kv_a_proj_with_mqa.weight"] = (KVL + ROPE, H)
        t[a + "kv_a_layernorm.weight"] = (KVL,)
        t[a + "kv_b_proj.weight"] = (HEADS * (NOPE + VH), KVL)
        t[a + "o_proj.weight"] = (H, HEADS * VH)
        m = p + "mlp."
        if l == 0:
            t[m + "gate_proj.weight"] = (DENSE_I, H)
            t[m + "up_proj.weight"] = (DENSE_I, H)
            t[m + "down_proj.weight"] = (H, DENSE_I)
        else:
            t[m + "gate.weight"] = (experts, H)
            t[m + "gate.e_score_correction_bias"] = (experts,)
            for e in [str(i) for i in range(experts)] + ["shared"]:
                q = m + ("shared_experts." if e == "shared" else "experts.%s." % e)
                t[q + "gate_proj.weight"] = (MOE_I, H)
                t[q + "up_proj.weight"] = (MOE_I, H)
                t[q + "down_proj.weight"] = (H, MOE_I)
    return t


def quantize(w):
    r, c = w.shape
    br, bc = math.ceil(r / 128), math.ceil(c / 128)
    pad = torch.zeros(br * 128, bc * 128, dtype=torch.float32)
    pad[:r, :c] = w
    blocks = pad.view(br, 128, bc, 128)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)
    scale = 448.0 / amax
    q = (blocks * scale[:, None, :, None]).clamp(-448, 448).view(br * 128, bc * 128)[:r, :c]
    return q.to(torch.float8_e4m3fn), (1.0 / scale).to(torch.float32)


def make(path, seed, experts):
    if os.path.exists(os.path.join(path, "model.safetensors")):
        return
    os.makedirs(path, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shp in shapes(experts).items():
        w = torch.randn(shp, generator=g) * 0.02
        if name.endswith("norm.weight"):
            w = 1 + w
        quant = len(shp) == 2 and ".layers." in name and ".gate.weight" not in name
        if quant:
            out[name], out[name + "_scale_inv"] = quantize(w)
        else:
            out[name] = w.to(torch.bfloat16)
    save_file(out, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": H,
           "intermediate_size": DENSE_I, "moe_intermediate_size": MOE_I, "num_hidden_layers": 2,
           "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "q_lora_rank": QL, "kv_lora_rank": KVL,
           "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE, "v_head_dim": VH, "n_routed_experts": experts,
           "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1, "n_group": 1,
           "topk_group": 1, "vocab_size": V, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16",
           "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                                   "weight_block_size": [128, 128]}}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--work", default="/tmp/mk-bench-quant-deepseek")
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--mem", default="2G")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    os.makedirs(a.work, exist_ok=True)
    os.chdir(a.work)
    for s in (1, 2):
        make("m%d" % s, s, a.experts)
    with open("lin.yml", "w") as f:
        f.write("merge_method: linear\nmodels:\n  - model: m1\n    parameters: {weight: 0.5}\n"
                "  - model: m2\n    parameters: {weight: 0.5}\n")
    subprocess.run(["rm", "-rf", "out"], check=True)
    b, t = build + "/bin/", build + "/tools/mk-rss"
    m = a.mem
    cmd = (f"{t} plan.rss {b}mk-plan --max-memory {m} lin.yml | {t} fetch.rss {b}mk-fetch --max-memory {m} | "
           f"{t} merge.rss {b}mk-merge --max-memory {m} | {t} pack.rss {b}mk-pack --max-memory {m} out")
    # (the budget given to each stage whole: the bound is per stage here)
    r = subprocess.run(["/usr/bin/time", "-f", "%e", "-o", "wall.txt", "sh", "-c", cmd])
    if r.returncode:
        sys.exit("the merge failed")
    size = lambda p: sum(os.path.getsize(os.path.join(p, f)) for f in os.listdir(p))
    print("inputs %.0f MB each (FP8), output %.0f MB, %d experts, wall %s s" %
          (size("m1") / 1e6, size("out") / 1e6, a.experts, open("wall.txt").read().strip()))
    for st in ("plan", "fetch", "merge", "pack"):
        print("%-6s peak RSS %6.1f MiB (--max-memory %s)" % (st, int(open(st + ".rss").read()) / 1024, m))


main()
