#!/usr/bin/env python3
"""quant-golden.py - the goldens of test/cli/quant.sh (testdata/quant/)
and test/cli/mxfp4.sh (testdata/mxfp4/), made with transformers and
mergekit in the reference venv, outside `make check`:

  ~/.cache/mk/mergekit-0.1.5-venv/bin/python scripts/quant-golden.py \
      build/tools/mk-gen-model testdata/quant
  ~/.cache/mk/mergekit-0.1.5-venv/bin/python scripts/quant-golden.py \
      --mxfp4 testdata/mxfp4
  ~/.cache/mk/mergekit-0.1.5-venv/bin/python scripts/quant-golden.py \
      --deepseek testdata/quant-ds

DeepSeek-V3 (--deepseek): see ds_main below.

MXFP4 (--mxfp4): three small gpt-oss models (seeds 1, 2, 3; the config
in MXFP4_CONFIG) built by transformers, their experts quantized to MXFP4
here as gpt-oss ships them (transformers quantizes with triton kernels
only, not on a CPU): ENAME_blocks (U8 [E, R, C/32, 16], two FP4 codes a
byte, the even element in the low nibble) and ENAME_scales (U8
[E, R, C/32], E8M0 exponents, bias 127) of the weight's transpose
[E, R, C].  The models (mxfp4-a, -b, -c) are committed; dequant-a/ is
transformers' dequantization (Mxfp4Config(dequantize=True)) of a, and
merge-CASE/ mergekit's merges of the dequantized copies with
testdata/quant/CASE.yml.

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


FP4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
MXFP4_CONFIG = dict(hidden_size=64, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2,
                    num_hidden_layers=1, layer_types=["full_attention"], vocab_size=16, num_attention_heads=2,
                    num_key_value_heads=1, head_dim=8, sliding_window=4, max_position_embeddings=256)
NOT_CONVERT = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]


def mxfp4_quantize(w):
    """w [E, C, R] (transformers' layout) -> blocks, scales of its
    transpose [E, R, C]: per 32 values the smallest power of two 2^k with
    max|x| / 2^k <= 6, each value rounded to the nearest FP4 value (ties to
    the even code)."""
    t = w.float().transpose(1, 2).contiguous()
    E, R, C = t.shape
    b = t.reshape(E, R, C // 32, 32)
    amax = b.abs().amax(-1)
    k = torch.ceil(torch.log2(torch.clamp(amax, min=2.0 ** -126) / 6.0)).to(torch.int32)
    k = torch.clamp(k, -127, 127)
    q = b / torch.ldexp(torch.ones_like(amax), k).unsqueeze(-1)
    mags = torch.tensor(FP4[:8])
    d = (q.abs().unsqueeze(-1) - mags).abs()
    code = d.argmin(-1)          # first minimum: the smaller code on a tie
    code = torch.where(q < 0, code + 8, code).to(torch.uint8)
    packed = code[..., 0::2] | (code[..., 1::2] << 4)
    return packed.contiguous(), (k + 127).to(torch.uint8).contiguous()


def mxfp4_model(d, seed):
    from transformers import GptOssConfig, GptOssForCausalLM
    torch.manual_seed(seed)
    cfg = GptOssConfig(**MXFP4_CONFIG)
    m = GptOssForCausalLM(cfg).to(torch.bfloat16)
    sd = {}
    for k, v in m.state_dict().items():
        if k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj"):
            # experts of varied magnitudes: scales over a range of exponents
            v = (torch.randn(v.shape) * 0.02 * torch.exp2(torch.arange(v.shape[0]).float() * 3 - 6)
                 .view(-1, 1, 1)).to(torch.bfloat16)
            blocks, scales = mxfp4_quantize(v)
            sd[k + "_blocks"], sd[k + "_scales"] = blocks, scales
        else:
            sd[k] = v.contiguous()
    os.makedirs(d, exist_ok=True)
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    c = cfg.to_dict()
    c["dtype"] = "bfloat16"
    c["architectures"] = ["GptOssForCausalLM"]
    c["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": NOT_CONVERT}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)


def mxfp4_dequantize(src, dst):
    from transformers import Mxfp4Config
    m = AutoModelForCausalLM.from_pretrained(src, quantization_config=Mxfp4Config(dequantize=True),
                                             dtype=torch.bfloat16)
    sd = {k: v.contiguous() for k, v in m.state_dict().items()}
    # the dequantized values are the FP4 codes times their scales
    raw = load_file(os.path.join(src, "model.safetensors"))
    for k in raw:
        if k.endswith("_blocks"):
            w = sd[k[:-len("_blocks")]].float()
            b, s = raw[k], raw[k[:-len("_blocks")] + "_scales"]
            lut = torch.tensor(FP4)
            vals = torch.stack([lut[(b & 15).long()], lut[(b >> 4).long()]], -1).reshape(*s.shape, 32)
            mine = (vals * torch.exp2(s.float() - 127).unsqueeze(-1)).reshape(s.shape[0], s.shape[1], -1)
            if not torch.equal(mine.transpose(1, 2), w):
                sys.exit(f"{k}: transformers' dequantization is not the layout the script assumes")
    os.makedirs(dst, exist_ok=True)
    save_file(sd, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg.pop("quantization_config", None)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def merge_goldens(cases, w, out, venv_bin):
    """mergekit-yaml's merge of w's dequantized copies (a-dq, b-dq, c-dq)
    by each CASE.yml of `cases`, into out/merge-CASE/."""
    for c in CASES:
        with open(os.path.join(cases, c + ".yml")) as f:
            y = (f.read().replace("MODEL_A", os.path.join(w, "a-dq")).replace("MODEL_B", os.path.join(w, "b-dq"))
                 .replace("MODEL_C", os.path.join(w, "c-dq")))
        yp = os.path.join(w, c + ".yml")
        with open(yp, "w") as f:
            f.write(y)
        mo = os.path.join(w, "out-" + c)
        subprocess.run([os.path.join(venv_bin, "mergekit-yaml"), "--no-copy-tokenizer", yp, mo], check=True)
        d = os.path.join(out, "merge-" + c)
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(mo, "model.safetensors"), d)
        print("golden", d)


def mxfp4_main(out):
    here = os.path.dirname(os.path.abspath(__file__))
    cases = os.path.join(os.path.dirname(here), "testdata", "quant")
    venv_bin = os.path.dirname(sys.executable)
    with tempfile.TemporaryDirectory() as w:
        for name, seed in (("a", 1), ("b", 2), ("c", 3)):
            q = os.path.join(out, "mxfp4-" + name)
            mxfp4_model(q, seed)
            mxfp4_dequantize(q, os.path.join(w, name + "-dq"))
        d = os.path.join(out, "dequant-a")
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(w, "a-dq", "model.safetensors"), d)
        merge_goldens(cases, w, out, venv_bin)


DS_CONFIG = dict(hidden_size=64, intermediate_size=64, moe_intermediate_size=16, n_routed_experts=4,
                 n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, num_hidden_layers=2,
                 q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
                 num_attention_heads=2, num_key_value_heads=2, vocab_size=32, n_group=1, topk_group=1,
                 max_position_embeddings=64, tie_word_embeddings=False, rope_scaling=None)
DS_BLOCK = [8, 8]


def ds_model(d, w, seed):
    """A tiny DeepseekV3ForCausalLM built by transformers (torch seed),
    saved as releases store it (save_pretrained: experts one by one), then
    every layer matrix but the router quantized block FP8 by transformers'
    own quantizer (Fp8Quantize) in DS_BLOCK blocks, NAME.weight_scale_inv
    beside each, config.json given the fp8 quantization_config."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    from transformers.integrations.finegrained_fp8 import Fp8Quantize

    class Q:
        class quantization_config:
            weight_block_size = DS_BLOCK
            scale_fmt = None
    torch.manual_seed(seed)
    m = DeepseekV3ForCausalLM(DeepseekV3Config(**DS_CONFIG)).to(torch.bfloat16)
    plain = os.path.join(w, "ds-plain-%d" % seed)
    m.save_pretrained(plain)
    sd = load_file(os.path.join(plain, "model.safetensors"))
    op, out = Fp8Quantize(Q), {}
    for k, v in sd.items():
        if v.ndim == 2 and k.endswith(".weight") and "layernorm" not in k and not k.endswith("mlp.gate.weight") \
                and k not in ("model.embed_tokens.weight", "lm_head.weight"):
            out.update(op._quantize_one(k, v))
        else:
            out[k] = v.contiguous()
    os.makedirs(d, exist_ok=True)
    save_file(out, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(plain, "config.json")) as f:
        c = json.load(f)
    c["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": DS_BLOCK}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)


def ds_loaded(src):
    """transformers' model of FP8 checkpoint src dequantized (BF16, the
    experts fused as transformers v5 holds them): its state dict."""
    m = AutoModelForCausalLM.from_pretrained(
        src, quantization_config=FineGrainedFP8Config(dequantize=True, weight_block_size=tuple(DS_BLOCK)),
        dtype=torch.bfloat16)
    return {k: v.contiguous() for k, v in m.state_dict().items()}


def ds_main(out):
    """--deepseek OUT: three tiny block-FP8 DeepSeek-V3 models (ds-a, ds-b,
    ds-c; experts one by one, as releases store them); dequant-a/:
    transformers' dequantization of ds-a as it holds it (experts fused);
    merge-CASE/: mergekit's merges of the dequantized copies (saved by
    save_pretrained, as a user's would be).  mergekit 0.1.5 has no
    DeepSeek-V3 definition and the architecture it infers leaves the
    routed experts out of its output, so for them experts-linear-f32/ is
    the linear merge computed here in float32 from transformers' fused
    dequantized experts (the weights of linear-f32.yml)."""
    here = os.path.dirname(os.path.abspath(__file__))
    cases = os.path.join(os.path.dirname(here), "testdata", "quant")
    venv_bin = os.path.dirname(sys.executable)
    loaded = {}
    with tempfile.TemporaryDirectory() as w:
        for name, seed in (("a", 1), ("b", 2), ("c", 3)):
            q = os.path.join(out, "ds-" + name)
            ds_model(q, w, seed)
            loaded[name] = ds_loaded(q)
            m = AutoModelForCausalLM.from_pretrained(
                q, quantization_config=FineGrainedFP8Config(dequantize=True, weight_block_size=tuple(DS_BLOCK)),
                dtype=torch.bfloat16)
            m.config.quantization_config = None
            m.hf_quantizer = None
            m.save_pretrained(os.path.join(w, name + "-dq"))
            cp = os.path.join(w, name + "-dq", "config.json")
            with open(cp) as f:
                c = json.load(f)
            c.pop("quantization_config", None)
            with open(cp, "w") as f:
                json.dump(c, f, indent=2)
        for d, sd in (("dequant-a", loaded["a"]),
                      ("experts-linear-f32", {k: 0.6 * loaded["a"][k].float() + 0.4 * loaded["b"][k].float()
                                              for k in loaded["a"] if k.endswith(("experts.gate_up_proj",
                                                                                  "experts.down_proj"))})):
            os.makedirs(os.path.join(out, d), exist_ok=True)
            save_file(sd, os.path.join(out, d, "model.safetensors"), metadata={"format": "pt"})
        merge_goldens(cases, w, out, venv_bin)


def main():
    if sys.argv[1] == "--mxfp4":
        return mxfp4_main(sys.argv[2])
    if sys.argv[1] == "--deepseek":
        return ds_main(sys.argv[2])
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
        merge_goldens(cases, w, out, venv_bin)


if __name__ == "__main__":
    main()
