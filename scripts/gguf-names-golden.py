"""Golden HF -> GGUF tensor names of convert_hf_to_gguf.py, for
test/unit/test_gguf_names.c.  Run outside the tests with the mergekit
venv's python, after scripts/gguf-reference-setup:

  ~/.cache/mk/mergekit-0.1.5-venv/bin/python scripts/gguf-names-golden.py \
      testdata/gguf/names-golden.txt

For each architecture a tiny Hugging Face model is made with every
parameter random (norms too), saved, converted with llama.cpp's
convert_hf_to_gguf.py (--outtype f32), and each saved tensor is found in
the GGUF file by its values: unchanged ("none"), with llama's Q/K row
permutation for n_head or n_head_kv heads ("permute_q", "permute_k"),
or plus one (gemma's norms, "plus1"); a saved tensor not written is
"skip".  GGUF tensors no saved tensor explains are listed as "extra"
with their values as float bit patterns (llama 3's rope_freqs).
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors.torch import load_file

REF = os.path.expanduser(os.environ.get("MK_GGUF_REF", "~/.cache/mk/llama.cpp-0.3.36"))
sys.path.insert(0, os.path.join(REF, "src", "gguf-py"))
import gguf  # noqa: E402

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPM = os.path.join(TOP, "testdata", "tokenizers", "spm-bpe-48.model")
T = transformers
BASE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, vocab_size=64)
MODELS = [
    ("llama", T.LlamaConfig, T.LlamaForCausalLM, dict(
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                          high_freq_factor=4.0, original_max_position_embeddings=8192),
        rope_theta=500000.0, max_position_embeddings=131072)),
    ("mistral", T.MistralConfig, T.MistralForCausalLM, {}),
    ("qwen2", T.Qwen2Config, T.Qwen2ForCausalLM, {}),
    ("qwen3", T.Qwen3Config, T.Qwen3ForCausalLM, dict(head_dim=16)),
    ("gemma2", T.Gemma2Config, T.Gemma2ForCausalLM, dict(head_dim=16)),
    ("gemma3", T.Gemma3TextConfig, T.Gemma3ForCausalLM, dict(head_dim=16)),
    ("phi3", T.Phi3Config, T.Phi3ForCausalLM, dict(pad_token_id=0, bos_token_id=1,
                                                   eos_token_id=2)),
]


def permute(w, n_head):
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    out = sys.argv[1]
    lines = ["# convert_hf_to_gguf.py's tensor names (llama.cpp 0c1e57098), made by",
             "# scripts/gguf-names-golden.py: hf-architecture hf-name gguf-name transform",
             "# (none, permute_q, permute_k, plus1; skip: not written); extra lines:",
             "# hf-architecture extra gguf-name n hex-float32..."]
    with tempfile.TemporaryDirectory() as tmp:
        for tag, cfg_cls, cls, kw in MODELS:
            torch.manual_seed(11)
            cfg = cfg_cls(**dict(BASE, **kw))
            model = cls(cfg).to(torch.float32)
            with torch.no_grad():
                for p in model.parameters():
                    p.normal_(0, 1)
            d = os.path.join(tmp, tag)
            model.save_pretrained(d, safe_serialization=True)
            shutil.copy(SPM, os.path.join(d, "tokenizer.model"))
            g = os.path.join(tmp, tag + ".gguf")
            r = subprocess.run([os.path.join(REF, "convert"), d, "--outtype", "f32", "--outfile", g],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if r.returncode:
                sys.stderr.write(r.stdout)
                raise SystemExit(f"convert failed for {tag}")
            hf_arch = cls.__name__
            sd = load_file(os.path.join(d, "model.safetensors"))
            reader = gguf.GGUFReader(g)
            gt = {t.name: np.array(t.data).reshape(list(reversed([int(x) for x in t.shape])))
                  for t in reader.tensors}
            used = set()
            nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
            for name in sorted(sd):
                x = sd[name].numpy()
                cands = [("none", x)]
                if x.shape[0] % (2 * nh) == 0:
                    cands.append(("permute_q", permute(x, nh)))
                if x.shape[0] % (2 * nkv) == 0 and nkv != nh:
                    cands.append(("permute_k", permute(x, nkv)))
                cands.append(("plus1", (sd[name] + 1).numpy()))
                found = None
                for gname, gx in gt.items():
                    for how, cx in cands:
                        if gx.shape == cx.shape and np.array_equal(gx, cx):
                            found = (gname, how)
                            break
                    if found:
                        break
                if found:
                    used.add(found[0])
                    lines.append(f"{hf_arch} {name} {found[0]} {found[1]}")
                else:
                    lines.append(f"{hf_arch} {name} - skip")
            for gname in sorted(set(gt) - used):
                v = gt[gname].reshape(-1).astype(np.float32)
                hexes = " ".join("%08x" % struct.unpack("<I", struct.pack("<f", f))[0] for f in v)
                lines.append(f"{hf_arch} extra {gname} {v.size} {hexes}")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
