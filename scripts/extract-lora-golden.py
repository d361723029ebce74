#!/usr/bin/env python3
"""extract-lora-golden - remake testdata/extract-lora: small fine-tune/base
model pairs and mergekit 0.1.5's mergekit-extract-lora output for each case
in testdata/extract-lora/CASES, the reference for mk-extract-lora.  Run by
hand from the repository's root with mergekit's venv (torch, transformers),
never by make check:

  ~/.cache/mk/mergekit-0.1.5-venv/bin/python scripts/extract-lora-golden.py

It writes
  testdata/extract-lora/models/NAME-{base,ft}   (save_pretrained, safetensors)
  testdata/extract-lora/CASES                    one line a case:
                                                 CASE BASE FT FLAGS...
  testdata/extract-lora/golden/CASE/             all mergekit wrote
                                                 (adapter_config.json,
                                                 adapter_model.safetensors,
                                                 README.md) and stderr.txt,
                                                 its warnings (and exit
                                                 status when not 0)
  testdata/extract-lora/golden/CASE/patched/     where mergekit crashed on
                                                 --save-module: its output
                                                 with the crash's cause
                                                 mended (WRAPPER_PATCHED)
Models: hidden 16, intermediate 32, 2 layers, vocab 32, 2 attention heads of
8, 1 key/value head (k_proj and v_proj are 8x16).  Each NAME-ft is NAME-base
plus a planted rank-3 delta on every 2-D weight (singular values 1, 0.5 and
0.25 times the weight's RMS singular value, plus a noise of about 1e-4 of it)
and small random changes to every norm and bias; the base's norms and biases
are moved off their initial values too, so a delta and a fine-tuned value
differ.  llama-v40-ft is llama-ft with its embedding and lm_head grown to 40
rows.

mergekit runs from the repository's root with relative paths
(testdata/extract-lora/models/...), PYTHONHASHSEED=0 (its target_modules
order is a set's) and argv[0] set to "mergekit-extract-lora", so the card's
invocation and the config's base_model_name_or_path hold no local path:
the card (README.md) has the title CASE, "extracted from
testdata/extract-lora/models/FT and uses .../BASE as a base", and the
command `mergekit-extract-lora --model testdata/extract-lora/models/FT
--base-model testdata/extract-lora/models/BASE --out-path
testdata/extract-lora/golden/CASE FLAGS...`; stderr.txt has "$TOP" and
"$VENV" for the repository's and the venv's paths (in tracebacks only).
`--models-only` stops after the models, `--cases-only` reuses them.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import torch
from transformers import AutoModelForCausalLM, Gemma2Config, LlamaConfig, Qwen2Config

TOP = "testdata/extract-lora"
MODELS = TOP + "/models"
GOLDEN = TOP + "/golden"

SHAPE = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, vocab_size=32,
             num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=64)

# name: (config, dtype, seed)
PAIRS = {
    "llama": (lambda: LlamaConfig(tie_word_embeddings=False, **SHAPE), torch.float32, 11),
    "qwen2": (lambda: Qwen2Config(tie_word_embeddings=True, **SHAPE), torch.float32, 12),
    "gemma2": (lambda: Gemma2Config(**SHAPE, query_pre_attn_scalar=8, sliding_window=32), torch.float32, 13),
    "llama-bf16": (lambda: LlamaConfig(tie_word_embeddings=False, **SHAPE), torch.bfloat16, 14),
}
PLANTED = (1.0, 0.5, 0.25)   # planted singular values, times the weight's scale
NOISE = 1e-4                 # the noise's singular values, about this times the scale

# --sv-epsilon: the planted singular values are 0.25 * scale or more (scale
# 0.05 .. 0.12 here), the noise's 1e-4 * scale or less (2.5e-4 in bfloat16,
# rounding); 1e-3 keeps exactly the planted three everywhere.  0.05 falls
# between planted values of some weights and not others: ranks differ.
EPS = "0.001"
EPS_MID = "0.05"

PER_ARCH = [("default", []), ("max-rank-2", ["--max-rank", "2"]), ("sv-epsilon", ["--sv-epsilon", EPS]),
            ("embed-lora", ["--embed-lora"]), ("skip-undecomposable", ["--skip-undecomposable"])]
CASES = []
for arch in ("llama", "qwen2", "gemma2"):
    for suffix, flags in PER_ARCH:
        CASES.append(("%s-%s" % (arch, suffix), arch + "-base", arch + "-ft", flags))
CASES += [
    ("llama-no-distribute-scale", "llama-base", "llama-ft", ["--no-distribute-scale"]),
    ("llama-include-exclude", "llama-base", "llama-ft", ["-i", r"layers\.0\.", "-e", "v_proj"]),
    # mergekit crashes (see WRAPPER_PATCHED); the next one does not: nothing
    # but q_proj goes to modules_to_save
    ("llama-save-module", "llama-base", "llama-ft", ["--save-module", "q_proj"]),
    ("llama-save-module-embed-lora-skip", "llama-base", "llama-ft",
     ["--save-module", "q_proj", "--save-module", "model.layers.1.mlp.down_proj", "--embed-lora",
      "--skip-undecomposable", "--max-rank", "3"]),
    # a module in modules_to_save keeps its bias (the fine-tune's, not a delta)
    ("qwen2-save-module-embed-lora-skip", "qwen2-base", "qwen2-ft",
     ["--save-module", "q_proj", "--embed-lora", "--skip-undecomposable", "--max-rank", "3"]),
    # the fine-tune is the base: every delta 0
    ("llama-same", "llama-base", "llama-base", ["--max-rank", "3"]),
    # -i matching nothing: no LoRA module, mergekit crashes
    ("llama-include-nothing", "llama-base", "llama-ft", ["-i", "nomatch"]),
    # every singular value under --sv-epsilon: rank 0 everywhere
    ("llama-sv-epsilon-all", "llama-base", "llama-ft", ["--sv-epsilon", "10"]),
    ("llama-sv-epsilon-mid", "llama-base", "llama-ft", ["--sv-epsilon", EPS_MID]),
    ("llama-embed-lora-max-rank-2", "llama-base", "llama-ft", ["--embed-lora", "--max-rank", "2"]),
    ("llama-exclude-embed", "llama-base", "llama-ft", ["-e", "embed_tokens", "-e", "lm_head", "--max-rank", "3"]),
    ("llama-bf16-default", "llama-bf16-base", "llama-bf16-ft", []),
    ("llama-bf16-max-rank-2", "llama-bf16-base", "llama-bf16-ft", ["--max-rank", "2"]),
    ("llama-v40-embed-lora", "llama-base", "llama-v40-ft", ["--embed-lora"]),
]


def planted(w, gen):
    """A rank-3 matrix of w's shape, singular values PLANTED times w's RMS
    singular value, plus Gaussian noise whose singular values are about
    NOISE times it."""
    m, n = w.shape
    w = w.float()
    scale = (w.norm() / min(m, n) ** 0.5).item()
    u, _ = torch.linalg.qr(torch.randn(m, 3, generator=gen))
    v, _ = torch.linalg.qr(torch.randn(n, 3, generator=gen))
    d = u @ torch.diag(torch.tensor(PLANTED) * scale) @ v.T
    # a Gaussian m x n matrix of unit entries has singular values up to
    # about sqrt(m) + sqrt(n)
    return d + torch.randn(m, n, generator=gen) * (NOISE * scale / (m ** 0.5 + n ** 0.5))


def nudge(t, gen, size):
    return t + torch.randn(t.shape, generator=gen) * size


def save(model, name):
    path = os.path.join(MODELS, name)
    shutil.rmtree(path, ignore_errors=True)
    model.save_pretrained(path, safe_serialization=True)
    # generation_config.json: not read by either program
    gc = os.path.join(path, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)


def make_pair(name, make_cfg, dtype, seed):
    torch.manual_seed(seed)
    cfg = make_cfg()
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        # the base: norms and biases away from their initial 1 (or 0) and 0
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(nudge(p, gen, 0.1))
    model = model.to(dtype)
    save(model, name + "-base")
    sigmas = {}
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 2:
                d = planted(p, gen)
                p.copy_((p.float() + d).to(dtype))
            else:
                p.copy_((p.float() + torch.randn(p.shape, generator=gen) * 0.05).to(dtype))
    save(model, name + "-ft")
    return model


def make_v40():
    """llama-ft with vocabulary 40: rows 32..39 of the embedding and of
    lm_head new, every other value llama-ft's."""
    ft = AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, "llama-ft"), dtype=torch.float32)
    cfg = ft.config
    cfg.vocab_size = 40
    torch.manual_seed(40)
    big = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    sd = ft.state_dict()
    gen = torch.Generator().manual_seed(4040)
    with torch.no_grad():
        for n, p in big.named_parameters():
            src = sd[n]
            if p.shape != src.shape:
                p.copy_(torch.cat([src, torch.randn(p.shape[0] - src.shape[0], p.shape[1], generator=gen) * 0.02]))
            else:
                p.copy_(src)
    save(big, "llama-v40-ft")


def show_sigmas():
    """Prints the singular values of a few deltas: three planted, then noise."""
    from safetensors.torch import load_file
    for pair, t in (("llama", "model.layers.0.self_attn.k_proj.weight"), ("llama", "model.embed_tokens.weight"),
                    ("qwen2", "model.layers.1.mlp.down_proj.weight"), ("gemma2", "lm_head.weight"),
                    ("llama-bf16", "model.layers.0.self_attn.q_proj.weight")):
        b = load_file(os.path.join(MODELS, pair + "-base", "model.safetensors"))
        f = load_file(os.path.join(MODELS, pair + "-ft", "model.safetensors"))
        if t not in f:
            t = "model.embed_tokens.weight"  # tied: no lm_head
        s = torch.linalg.svdvals((f[t] - b[t]).float())
        print("%-10s %-40s sigma %s" % (pair, t, " ".join("%.3g" % x for x in s[:6].tolist())))
    # every weight: the smallest planted and the largest noise value, to
    # check EPS falls clear of them, and EPS_MID of llama's planted values
    lo, hi, near = 1e9, 0.0, []
    for pair in PAIRS:
        b = load_file(os.path.join(MODELS, pair + "-base", "model.safetensors"))
        f = load_file(os.path.join(MODELS, pair + "-ft", "model.safetensors"))
        for t in f:
            if f[t].dim() == 2:
                s = torch.linalg.svdvals((f[t] - b[t]).float())
                lo, hi = min(lo, s[2].item()), max(hi, s[3].item())
                for x in s[:3].tolist():
                    if pair == "llama" and abs(x - float(EPS_MID)) < 0.1 * float(EPS_MID):
                        near.append((pair, t, x))
    print("smallest planted sigma %.3g, largest noise sigma %.3g, --sv-epsilon %s" % (lo, hi, EPS))
    assert hi < float(EPS) < lo, "EPS does not separate planted values from noise"
    assert not near, "planted values within 10%% of EPS_MID: %s" % near


WRAPPER = ("import sys; sys.argv[0] = 'mergekit-extract-lora'; "
           "from mergekit.scripts.extract_lora import main; main()")
# mergekit with --save-module crashes as soon as it adds a module of its own
# to modules_to_save (click hands main a tuple, which it appends to); this
# runs it with that one thing changed: main gets a list
WRAPPER_PATCHED = ("import sys; sys.argv[0] = 'mergekit-extract-lora'; "
                   "from mergekit.scripts.extract_lora import main; f = main.callback; "
                   "main.callback = lambda **kw: f(**dict(kw, modules_to_save=list(kw['modules_to_save']))); "
                   "main()")


def clean_stderr(text):
    """mergekit's stderr less tqdm's progress bars, local paths replaced."""
    out = []
    for line in text.replace("\r", "\n").split("\n"):
        if not line.strip() or re.search(r"\d+%\|", line) or re.match(r"^\s*\d+it \[", line):
            continue
        line = line.replace(os.getcwd(), "$TOP").replace(sys.prefix, "$VENV")
        out.append(line)
    return "\n".join(out) + ("\n" if out else "")


def run_case(case, base, ft, flags, patched=False):
    """mergekit on one case into golden/CASE (golden/CASE/patched with
    WRAPPER_PATCHED); returns its exit status."""
    out = os.path.join(GOLDEN, case, "patched") if patched else os.path.join(GOLDEN, case)
    shutil.rmtree(out, ignore_errors=True)
    args = ["--model", MODELS + "/" + ft, "--base-model", MODELS + "/" + base, "--out-path", out] + flags
    env = dict(os.environ, PYTHONHASHSEED="0", HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="", TQDM_DISABLE="1")
    r = subprocess.run([sys.executable, "-c", WRAPPER_PATCHED if patched else WRAPPER] + args, env=env,
                       capture_output=True, text=True)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "stderr.txt"), "w") as f:
        f.write(clean_stderr(r.stderr))
        if r.returncode:
            f.write("exit status %d\n" % r.returncode)
    print("%-32s rc=%d %s" % (case + (" (patched)" if patched else ""), r.returncode,
                              " ".join(sorted(os.listdir(out)))))
    return r.returncode


def main():
    if not os.path.isdir("scripts") or not os.path.isdir("testdata"):
        sys.exit("extract-lora-golden: run from the repository's root")
    if "--cases-only" not in sys.argv:
        os.makedirs(MODELS, exist_ok=True)
        for name, (make_cfg, dtype, seed) in PAIRS.items():
            make_pair(name, make_cfg, dtype, seed)
        make_v40()
        show_sigmas()
    if "--models-only" in sys.argv:
        return
    with open(os.path.join(TOP, "CASES"), "w") as f:
        for case, base, ft, flags in CASES:
            f.write(" ".join([case, base, ft] + flags) + "\n")
    shutil.rmtree(GOLDEN, ignore_errors=True)
    for case, base, ft, flags in CASES:
        if run_case(case, base, ft, flags) and "--save-module" in flags:
            run_case(case, base, ft, flags, patched=True)


if __name__ == "__main__":
    main()
