"""Golden per-tensor types of llama-quantize for test/unit/test_gguf_mix.c.

Run outside the repository's tests, with the mergekit venv's python
(torch, transformers, sentencepiece) after scripts/gguf-reference-setup:

  ~/.cache/mk/mergekit-0.1.5-venv/bin/python scripts/gguf-mix-golden.py \
      testdata/gguf

Makes tiny random Hugging Face models (llama, llama with tied embeddings
and rows no multiple of 256, phi3, mixtral with 8 experts), converts
each with llama.cpp's convert_hf_to_gguf.py (--outtype f32), quantizes
that with llama-quantize to every file type mk writes, and writes what
type each tensor got to OUT/mix-golden.txt.  Splits the llama-12 file
with llama-gguf-split (--split-max-size 5M, --split-max-tensors 16):
which shard each tensor went to in OUT/split-golden.txt, the second
5M shard's header (up to its data) in OUT/split-shard2-header.bin.  Also keeps the smallest
model's converted file as OUT/tiny-llama-f16.gguf (--outtype f16) for
test/tools/mk-gguf-read.py's check.

With MK_GGUF_COMPARE=/path/to/gguf-quant-golden (built as its header
says), every quantized file is also checked whole: mk's types and every
tensor's bytes as mk quantizes them from the f32 file (--compare).
"""
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import transformers

REF = os.path.expanduser(os.environ.get("MK_GGUF_REF", "~/.cache/mk/llama.cpp-0.3.36"))
sys.path.insert(0, os.path.join(REF, "src", "gguf-py"))
import gguf  # noqa: E402

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPM = os.path.join(TOP, "testdata", "tokenizers", "spm-bpe-48.model")
FTYPES = ["Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K", "F16", "BF16", "F32"]

MODELS = {
    "llama-12": (transformers.LlamaConfig, transformers.LlamaForCausalLM, dict(
        hidden_size=256, intermediate_size=768, num_hidden_layers=12,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
        tie_word_embeddings=False)),
    "llama-tied-odd-9": (transformers.LlamaConfig, transformers.LlamaForCausalLM, dict(
        hidden_size=320, intermediate_size=544, num_hidden_layers=9,
        num_attention_heads=5, num_key_value_heads=5, vocab_size=64,
        tie_word_embeddings=True)),
    "phi3-10": (transformers.Phi3Config, transformers.Phi3ForCausalLM, dict(
        hidden_size=256, intermediate_size=512, num_hidden_layers=10,
        num_attention_heads=4, num_key_value_heads=4, vocab_size=64,
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    "mixtral-8": (transformers.MixtralConfig, transformers.MixtralForCausalLM, dict(
        hidden_size=256, intermediate_size=256, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
        num_local_experts=8, num_experts_per_tok=2)),
}


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        sys.stderr.write(r.stdout)
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return r.stdout


def make_model(name, d):
    cfg_cls, model_cls, kw = MODELS[name]
    torch.manual_seed(7)
    model = model_cls(cfg_cls(**kw)).to(torch.float32)
    model.save_pretrained(d, safe_serialization=True)
    shutil.copy(SPM, os.path.join(d, "tokenizer.model"))


def kv(reader, key):
    f = reader.fields.get(key)
    return int(f.parts[f.data[0]][0]) if f else 0


def split_golden(tmp, f32, out):
    src = gguf.GGUFReader(f32)
    lines = ["# llama-gguf-split's shards of a 111-tensor f32 llama (scripts/gguf-mix-golden.py):",
             "# a 'split' line (size BYTES or tensors N), then per tensor in file order:",
             "# name bytes shard"]
    for mode, arg in (("size", "5M"), ("tensors", "16")):
        prefix = os.path.join(tmp, "split-" + mode)
        opt = "--split-max-size" if mode == "size" else "--split-max-tensors"
        run([os.path.join(REF, "build", "bin", "llama-gguf-split"), "--split", opt, arg, f32, prefix])
        shard = {}
        i = 0
        while True:
            p = f"{prefix}-{i + 1:05d}-of-"
            found = [f for f in os.listdir(tmp) if os.path.join(tmp, f).startswith(p)]
            if not found:
                break
            r = gguf.GGUFReader(os.path.join(tmp, found[0]))
            for t in r.tensors:
                shard[t.name] = i
            if mode == "size" and i == 1:
                with open(os.path.join(tmp, found[0]), "rb") as f:
                    head = f.read(r.data_offset)
                with open(os.path.join(out, "split-shard2-header.bin"), "wb") as f:
                    f.write(head)
            i += 1
        lines.append(f"split {mode} {5000000 if mode == 'size' else 16} shards {i}")
        for t in src.tensors:
            lines.append(f"{t.name} {int(t.n_bytes)} {shard[t.name]}")
    with open(os.path.join(out, "split-golden.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(TOP, "testdata", "gguf")
    lines = ["# llama-quantize's tensor types (llama.cpp 0c1e57098, no imatrix),",
             "# made by scripts/gguf-mix-golden.py.  Per model: a 'model' line, then",
             "# name ne0 ne1 ne2 converted-type and one type per file type of 'ftypes'",
             "ftypes " + " ".join(FTYPES)]
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            d = os.path.join(tmp, name)
            make_model(name, d)
            f32 = os.path.join(tmp, name + "-f32.gguf")
            run([os.path.join(REF, "convert"), d, "--outtype", "f32", "--outfile", f32])
            src = gguf.GGUFReader(f32)
            arch = bytes(src.fields["general.architecture"].parts[-1]).decode()
            hp = [kv(src, f"{arch}.{k}") for k in
                  ("block_count", "attention.head_count", "attention.head_count_kv", "expert_count")]
            lines.append(f"model {name} {arch} {hp[0]} {hp[1]} {hp[2]} {hp[3]}")
            got = {}
            for ft in FTYPES:
                q = os.path.join(tmp, f"{name}-{ft}.gguf")
                run([os.path.join(REF, "build", "bin", "llama-quantize"), f32, q, ft, "2"])
                if os.environ.get("MK_GGUF_COMPARE"):
                    print(run([os.environ["MK_GGUF_COMPARE"], "--compare", f32, q]).strip())
                got[ft] = {t.name: int(t.tensor_type) for t in gguf.GGUFReader(q).tensors}
            if name == "llama-12":
                split_golden(tmp, f32, out)
            for t in src.tensors:
                ne = [int(x) for x in t.shape] + [1, 1, 1]
                lines.append(" ".join([t.name] + [str(x) for x in ne[:3]] +
                                      [str(int(t.tensor_type))] +
                                      [str(got[ft][t.name]) for ft in FTYPES]))
        # a small file the reference wrote, for the reader's check
        d = os.path.join(tmp, "tiny")
        cfg = dict(MODELS["llama-12"][2], hidden_size=64, intermediate_size=128,
                   num_hidden_layers=2)
        torch.manual_seed(3)
        transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg)).save_pretrained(d)
        shutil.copy(SPM, os.path.join(d, "tokenizer.model"))
        run([os.path.join(REF, "convert"), d, "--outtype", "f16",
             "--outfile", os.path.join(out, "tiny-llama-f16.gguf")])
    with open(os.path.join(out, "mix-golden.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
