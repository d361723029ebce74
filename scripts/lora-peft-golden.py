#!/usr/bin/env python3
"""lora-peft-golden - remake testdata/lora-peft: PEFT adapters (DoRA,
lora_bias, a LoRA of a tied lm_head, lora_B biases without lora_bias, a
bfloat16 base) and mergekit 0.1.5's merges of BASE+ADAPTER, for
test/cli/lora-peft.sh.  Run by hand with mergekit's venv (peft, torch,
transformers), never by make check:

  ~/.cache/mk/mergekit-0.1.5-venv/bin/python scripts/lora-peft-golden.py \\
      build/tools/mk-gen-model testdata/lora-peft

The two bases are made with mk-gen-model in a scratch folder (the test
makes them again and checks their sha256, written to OUT/bases.sha256):
  qt  --arch qwen2 --tied --dtype F32 --layers 2 --hidden 16 --inter 32 --vocab 32 --seed 301
  bb  --dtype BF16 --layers 2 --hidden 16 --inter 32 --vocab 32 --seed 302
Each adapter is PEFT's get_peft_model on a base with its LoRA tensors
(and DoRA magnitudes) set from a fixed seed, saved by save_pretrained.
Each golden OUT/golden/CASE/model.safetensors is the tensors mergekit-yaml
wrote for `merge_method: passthrough` of the one model BASE+ADAPTER
(with --lora-merge-cache, and --lora-merge-dtype for the *-f32 cases).
"""
import hashlib, json, os, shutil, subprocess, sys, tempfile

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

BASES = {
    "qt": ["--arch", "qwen2", "--tied", "--dtype", "F32", "--layers", "2", "--hidden", "16", "--inter", "32",
           "--vocab", "32", "--seed", "301"],
    "bb": ["--dtype", "BF16", "--layers", "2", "--hidden", "16", "--inter", "32", "--vocab", "32", "--seed", "302"],
}

# adapter: base, LoraConfig arguments
ADAPTERS = {
    # DoRA of linear layers (norms of W's rows) and of the embedding
    # (norms of its columns; PEFT saves the embedding layer too)
    "dora": ("qt", dict(use_dora=True, target_modules=["q_proj", "o_proj", "embed_tokens"])),
    # lora_bias: q_proj and v_proj have biases in qwen2
    "bias": ("qt", dict(lora_bias=True, target_modules=["q_proj", "v_proj"])),
    # lora_bias on o_proj, which has none: PEFT's merge fails
    "nobias": ("qt", dict(lora_bias=True, target_modules=["o_proj"])),
    # lm_head tied to the embedding (PEFT also saves lm_head's base layer)
    "head": ("qt", dict(target_modules=["lm_head", "q_proj"])),
    # a bfloat16 base: linear layers and the embedding; DoRA
    "bf": ("bb", dict(target_modules=["q_proj", "down_proj", "embed_tokens"])),
    "bfdora": ("bb", dict(use_dora=True, target_modules=["q_proj", "down_proj"])),
}

# case: adapter, --lora-merge-dtype
CASES = {
    "dora": ("dora", None), "bias": ("bias", None), "head": ("head", None), "xbias": ("xbias", None),
    "bf": ("bf", None), "bf-f32": ("bf", "float32"), "bfdora": ("bfdora", None),
    "bfdora-f32": ("bfdora", "float32"),
}


def make_adapter(base, out, kw, seed):
    torch.manual_seed(seed)
    pm = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, **kw))
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_" in n:
                # magnitudes near 1 (a norm's size), the rest around 0
                p.copy_(torch.randn_like(p) * 0.3 + (1.0 if "magnitude" in n else 0.0))
    pm.save_pretrained(out)
    os.remove(os.path.join(out, "README.md"))  # PEFT's model card: not read


def main():
    gen, out = sys.argv[1], os.path.abspath(sys.argv[2])
    venv_bin = os.path.dirname(sys.executable)
    work = tempfile.mkdtemp(prefix="lora-peft-")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "bases.sha256"), "w") as f:
        for b, args in BASES.items():
            subprocess.run([gen] + args + [os.path.join(work, b)], check=True)
            h = hashlib.sha256(open(os.path.join(work, b, "model.safetensors"), "rb").read()).hexdigest()
            f.write("%s  %s/model.safetensors\n" % (h, b))
    for i, (ad, (base, kw)) in enumerate(sorted(ADAPTERS.items())):
        d = os.path.join(out, "ad-" + ad)
        shutil.rmtree(d, ignore_errors=True)
        make_adapter(os.path.join(work, base), d, kw, 100 + i)
        cfg = os.path.join(d, "adapter_config.json")
        c = json.load(open(cfg))
        c["base_model_name_or_path"] = base
        json.dump(c, open(cfg, "w"), indent=2, sort_keys=True)
    # lora_B biases without lora_bias (as mergekit-extract-lora writes
    # them): PEFT drops them when it loads the adapter
    d = os.path.join(out, "ad-xbias")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(os.path.join(out, "ad-bias"), d)
    c = json.load(open(os.path.join(d, "adapter_config.json")))
    c["lora_bias"] = False
    json.dump(c, open(os.path.join(d, "adapter_config.json"), "w"), indent=2, sort_keys=True)
    for case, (ad, md) in sorted(CASES.items()):
        base = ADAPTERS.get(ad, ("qt",))[0]
        yml = os.path.join(work, case + ".yml")
        with open(yml, "w") as f:
            f.write("merge_method: passthrough\nmodels:\n  - model: %s+%s\n" % (os.path.join(work, base),
                                                                                 os.path.join(out, "ad-" + ad)))
        res = os.path.join(work, "out-" + case)
        cmd = [os.path.join(venv_bin, "mergekit-yaml"), "--lora-merge-cache", os.path.join(work, "cache-" + case)]
        if md:
            cmd += ["--lora-merge-dtype", md]
        subprocess.run(cmd + [yml, res], check=True, env=dict(os.environ, HF_HUB_OFFLINE="1"),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        g = os.path.join(out, "golden", case)
        os.makedirs(g, exist_ok=True)
        shutil.copy(os.path.join(res, "model.safetensors"), g)
        print("lora-peft-golden: %s" % case)
    shutil.rmtree(work)


main()
