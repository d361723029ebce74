"""Golden GGUF key-value pairs of convert_hf_to_gguf.py, for
test/unit/test_gguf_meta.c.  Run outside the tests with the mergekit
venv's python, after scripts/gguf-reference-setup:

  ~/.cache/mk/mergekit-0.1.5-venv/bin/python scripts/gguf-meta-golden.py \
      testdata/gguf-meta

For each model below a tiny Hugging Face model (random weights) is saved
with a small tokenizer of its family (testdata/tokenizers/encode/FAMILY),
a tokenizer_config.json with a chat template and a generation_config.json,
and converted by llama.cpp's convert_hf_to_gguf.py --outtype f32.  The
small vocabularies are not in convert's table of pre-tokenizer hashes,
so convert is run with that one lookup answering the family's name
(llama-bpe, qwen2) when the hash is unknown; the table itself is checked
on the real vocabularies (see --full below).  Into OUT/NAME/ go the
files mk reads (config.json, generation_config.json, tokenizer.json,
tokenizer_config.json) and OUT/NAME.kv gets every pair convert wrote, in
its order: "KEY<TAB>VTYPE<TAB>HEX" with HEX the value's bytes as GGUF
stores them after the type (over 16 KiB: "sha256:LENGTH:DIGEST"), and a first line "# params N" (the
parameter count convert measured, for general.size_label).

  --full DIR   instead: rebuild the real llama-bpe and qwen2 tokenizers
               from llama.cpp's models/ggml-vocab-*.gguf into DIR/NAME/
               and write DIR/NAME.pre with the name convert's hash table
               gives them (for MK_GGUF_META_FULL=DIR in the unit test).
"""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers

REF = os.path.expanduser(os.environ.get("MK_GGUF_REF", "~/.cache/mk/llama.cpp-0.3.36"))
sys.path.insert(0, os.path.join(REF, "src", "gguf-py"))
import gguf  # noqa: E402

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKS = os.path.join(TOP, "testdata", "tokenizers", "encode")
T = transformers
BASE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2)

LLAMA3_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + "
                   "message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + "
                   "'<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
                   "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
QWEN_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
                 "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

# name (the directory's, read by convert for general.name), family,
# pre name for the unknown hash, config class, model class, config,
# tokenizer_config additions, generation_config
MODELS = [
    ("Meta-Llama-3.1-8B-Instruct", "llama3", "llama-bpe", T.LlamaConfig, T.LlamaForCausalLM,
     dict(vocab_size=1006, bos_token_id=1000, eos_token_id=[1001, 1005],
          rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                            high_freq_factor=4.0, original_max_position_embeddings=8192),
          rope_theta=500000.0, max_position_embeddings=131072, rms_norm_eps=1e-5),
     dict(chat_template=LLAMA3_TEMPLATE),
     dict(bos_token_id=1000, eos_token_id=[1001, 1005], do_sample=True, temperature=0.6, top_p=0.9)),
    ("Qwen2.5-0.5B-Instruct", "qwen2", "qwen2", T.Qwen2Config, T.Qwen2ForCausalLM,
     dict(vocab_size=1024, bos_token_id=1000, eos_token_id=1002, tie_word_embeddings=True,
          rope_theta=1000000.0, max_position_embeddings=32768, rms_norm_eps=1e-6,
          sliding_window=32768, max_window_layers=21),
     dict(chat_template=QWEN_TEMPLATE, add_bos_token=False),
     dict(bos_token_id=1000, eos_token_id=[1002, 1000], pad_token_id=1000, do_sample=True,
          repetition_penalty=1.1, temperature=0.7, top_p=0.8, top_k=20)),
    ("qwen3-tiny", "qwen2", "qwen2", T.Qwen3Config, T.Qwen3ForCausalLM,
     dict(vocab_size=1003, head_dim=16, bos_token_id=1000, eos_token_id=1002,
          rope_theta=1000000.0, max_position_embeddings=131072, rms_norm_eps=1e-6,
          rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32768,
                            beta_fast=32.0, beta_slow=1.0)),
     dict(chat_template=QWEN_TEMPLATE),
     None),
    # SentencePiece: testdata/tokenizers/spm-bpe-48.model with the
    # tokenizer.json and tokenizer_config.json transformers writes for it
    ("Mistral-7B-Instruct-v0.3", "spm-mistral", None, T.MistralConfig, T.MistralForCausalLM,
     dict(vocab_size=64, bos_token_id=1, eos_token_id=2, rope_theta=1000000.0,
          max_position_embeddings=32768, sliding_window=None),
     dict(add_bos_token=True, add_eos_token=False, chat_template=LLAMA3_TEMPLATE),
     dict(bos_token_id=1, eos_token_id=2)),
    ("llama-2-tiny-chat", "spm-llama", None, T.LlamaConfig, T.LlamaForCausalLM,
     dict(vocab_size=48, bos_token_id=1, eos_token_id=2, pad_token_id=0,
          rope_scaling=dict(rope_type="linear", factor=2.0), max_position_embeddings=4096),
     dict(add_prefix_space=True),
     None),
    ("gemma-2-2b-it", "spm-gemma", None, T.Gemma2Config, T.Gemma2ForCausalLM,
     dict(vocab_size=64, head_dim=16, bos_token_id=1, eos_token_id=2, pad_token_id=0,
          sliding_window=4096, max_position_embeddings=8192),
     dict(add_bos_token=True),
     dict(bos_token_id=1, eos_token_id=[2, 3], pad_token_id=0, cache_implementation="hybrid")),
    ("gemma-3-1b-it", "spm-gemma", None, T.Gemma3TextConfig, T.Gemma3ForCausalLM,
     dict(vocab_size=64, head_dim=16, bos_token_id=1, eos_token_id=2, pad_token_id=0,
          sliding_window=512, max_position_embeddings=32768, final_logit_softcapping=None),
     dict(add_bos_token=True),
     dict(bos_token_id=1, eos_token_id=[2, 3], top_k=64, top_p=0.95)),
    ("Phi-3-mini-128k-instruct", "spm-llama", None, T.Phi3Config, T.Phi3ForCausalLM,
     dict(vocab_size=64, bos_token_id=1, eos_token_id=2, pad_token_id=0, head_dim=16,
          max_position_embeddings=131072, original_max_position_embeddings=4096,
          sliding_window=262144,
          rope_scaling=dict(rope_type="longrope",
                            long_factor=[1.0, 1.25, 1.5, 2.0, 3.5, 8.0, 16.5, 32.0],
                            short_factor=[1.0, 1.0, 1.0625, 1.1, 1.2, 1.3, 1.4, 1.5])),
     dict(add_bos_token=False),
     None),
    # llama's add_bos_token false at vocab_size 49152 (small Granite
    # models), over a GPT-2 style tokenizer
    ("granite-tiny", "qwen2", "qwen2", T.LlamaConfig, T.LlamaForCausalLM,
     dict(vocab_size=49152, bos_token_id=1000, eos_token_id=1002, tie_word_embeddings=True),
     dict(add_bos_token=True),
     None),
    # Gemma 3 without tokenizer.model: the GPT-2 style path
    ("gemma-3-bpe", "llama3", "llama-bpe", T.Gemma3TextConfig, T.Gemma3ForCausalLM,
     dict(vocab_size=1006, head_dim=16, bos_token_id=1000, eos_token_id=1005, pad_token_id=1002,
          sliding_window=512, max_position_embeddings=32768, final_logit_softcapping=30.0),
     dict(),
     None),
    # hand-written configs (RAW_CONFIGS): the model made from what
    # transformers reads of them, then config.json put back as written
    ("llama-3-raw-config", "llama3", "llama-bpe", None, T.LlamaForCausalLM, {}, {}, None),
    ("mistral-raw-config", "spm-llama", None, None, T.MistralForCausalLM, {}, {}, None),
    ("phi3-raw-config", "spm-llama", None, None, T.Phi3ForCausalLM, {}, {}, None),
    ("gemma2-raw-config", "spm-gemma", None, None, T.Gemma2ForCausalLM, {}, {}, None),
]
SPM = os.path.join(TOP, "testdata", "tokenizers", "spm-bpe-48.model")

# README.md model cards: mk's own (a merge's) and one with the other keys
# gguf-py reads
CARDS = {
    "Qwen2.5-0.5B-Instruct": "---\nbase_model:\n- Qwen/Qwen2.5-0.5B-Instruct\n"
                             "- someone/Qwen2.5-0.5B-Math-v1.2\nlibrary_name: transformers\n"
                             "tags:\n- mergekit\n- merge\n\n---\n# merged\n\nA merge.\n",
    "llama-2-tiny-chat": "---\nlicense:\n- llama2\n- mit\nlanguage:\n- en\n- no\n"
                         "datasets:\n- org/some-data\n- https://huggingface.co/datasets-x/dolly-v2\n"
                         "pipeline_tag: text-generation\nmodel_creator: Meta\n"
                         "base_model: https://huggingface.co/meta-llama/Llama-2-7b-hf\n"
                         "description: \"A \\\"tiny\\\" chat model\"\nversion: \"2.0\"\n---\n"
                         "# Llama 2\n",
}

# configs written by hand, as older transformers wrote them or as people
# trim them: convert reads them through transformers, defaults and all
RAW = dict(architectures=None, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
           num_attention_heads=4)
RAW_CONFIGS = {
    "llama-3-raw-config": dict(RAW, architectures=["LlamaForCausalLM"], model_type="llama",
                               num_key_value_heads=2, vocab_size=1006,
                               max_position_embeddings=131072, rms_norm_eps=1e-05,
                               rope_scaling=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                                 original_max_position_embeddings=8192,
                                                 rope_type="llama3"),
                               rope_theta=500000.0, bos_token_id=1000, eos_token_id=[1001, 1005],
                               torch_dtype="bfloat16"),
    "mistral-raw-config": dict(RAW, architectures=["MistralForCausalLM"], model_type="mistral",
                               num_key_value_heads=2, vocab_size=64, bos_token_id=1, eos_token_id=2),
    "phi3-raw-config": dict(RAW, architectures=["Phi3ForCausalLM"], model_type="phi3",
                            vocab_size=64, bos_token_id=1, eos_token_id=2, pad_token_id=0),
    "gemma2-raw-config": dict(RAW, architectures=["Gemma2ForCausalLM"], model_type="gemma2",
                              num_key_value_heads=2, vocab_size=64, rms_norm_eps=1e-06),
}

RUNNER = r"""
import os, sys
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.join(os.environ["MK_REF_SRC"], "gguf-py"))
sys.path.insert(0, os.environ["MK_REF_SRC"])
from conversion import base
orig = base.TextModel.get_vocab_base_pre
def pre(self, tokenizer):
    try:
        return orig(self, tokenizer)
    except NotImplementedError:
        return os.environ["MK_PRE"]
base.TextModel.get_vocab_base_pre = pre
import runpy
runpy.run_path(os.path.join(os.environ["MK_REF_SRC"], "convert_hf_to_gguf.py"), run_name="__main__")
"""


def kv_spans(path):
    """Every pair of a GGUF file: (key, vtype, raw value bytes)."""
    d = open(path, "rb").read()
    p = 4 + 4
    n_t, n_kv = struct.unpack_from("<QQ", d, p)
    p += 16
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(vt, p):
        if vt == 8:
            n, = struct.unpack_from("<Q", d, p)
            return p + 8 + n
        if vt == 9:
            et, n = struct.unpack_from("<IQ", d, p)
            p += 12
            for _ in range(n):
                p = skip(et, p)
            return p
        return p + sizes[vt]

    out = []
    for _ in range(n_kv):
        n, = struct.unpack_from("<Q", d, p)
        key = d[p + 8:p + 8 + n].decode()
        p += 8 + n
        vt, = struct.unpack_from("<I", d, p)
        p += 4
        e = skip(vt, p)
        out.append((key, vt, d[p:e]))
        p = e
    return out


def convert(d, g, pre, extra=()):
    env = dict(os.environ, MK_REF_SRC=os.path.join(REF, "src"), MK_PRE=pre)
    env.pop("NO_LOCAL_GGUF", None)
    r = subprocess.run([sys.executable, "-c", RUNNER, "convert", d, "--outtype", "f32",
                        "--outfile", g, *extra],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if r.returncode:
        sys.stderr.write(r.stdout)
        raise SystemExit(f"convert failed for {d}")


def main_small(out):
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, fam, pre, cfg_cls, cls, kw, tok_extra, gen in MODELS:
            torch.manual_seed(7)
            d = os.path.join(tmp, name)
            if name in RAW_CONFIGS:
                os.makedirs(d)
                with open(os.path.join(d, "config.json"), "w") as f:
                    json.dump(RAW_CONFIGS[name], f, indent=2)
                cfg = transformers.AutoConfig.from_pretrained(d)
            else:
                cfg = cfg_cls(**dict(BASE, **kw))
            model = cls(cfg).to(torch.float32)
            model.save_pretrained(d, safe_serialization=True)
            if name in RAW_CONFIGS:
                with open(os.path.join(d, "config.json"), "w") as f:
                    json.dump(RAW_CONFIGS[name], f, indent=2)
            gpath = os.path.join(d, "generation_config.json")
            if gen is None:
                if os.path.exists(gpath):
                    os.remove(gpath)
            else:
                with open(gpath, "w") as f:
                    json.dump(gen, f, indent=2)
            if fam.startswith("spm-"):
                tcls = T.GemmaTokenizer if fam == "spm-gemma" else T.LlamaTokenizer
                tcls(vocab_file=SPM).save_pretrained(d)
                shutil.copy(SPM, os.path.join(d, "tokenizer.model"))
                if fam == "spm-mistral":
                    # Mistral's own tokenizer.json adds <s> in its template
                    with open(os.path.join(d, "tokenizer.json")) as f:
                        tj = json.load(f)
                    bos = dict(SpecialToken=dict(id="<s>", type_id=0))
                    tj["post_processor"] = dict(
                        type="TemplateProcessing",
                        single=[bos, dict(Sequence=dict(id="A", type_id=0))],
                        pair=[bos, dict(Sequence=dict(id="A", type_id=0)), bos,
                              dict(Sequence=dict(id="B", type_id=1))],
                        special_tokens={"<s>": dict(id="<s>", ids=[1], tokens=["<s>"])})
                    with open(os.path.join(d, "tokenizer.json"), "w") as f:
                        json.dump(tj, f, indent=2, ensure_ascii=False)
                with open(os.path.join(d, "tokenizer_config.json")) as f:
                    tc = json.load(f)
            else:
                shutil.copy(os.path.join(TOKS, fam, "tokenizer.json"), d)
                with open(os.path.join(TOKS, fam, "tokenizer_config.json")) as f:
                    tc = json.load(f)
            tc.update(tok_extra)
            if name == "qwen3-tiny":
                # the template in chat_template.jinja, as transformers 5 saves it
                with open(os.path.join(d, "chat_template.jinja"), "w") as f:
                    f.write(tc.pop("chat_template"))
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump(tc, f, indent=2)
            if name in CARDS:
                with open(os.path.join(d, "README.md"), "w") as f:
                    f.write(CARDS[name])
            g = os.path.join(tmp, name + ".gguf")
            convert(d, g, pre or "none")
            keep = os.path.join(out, name)
            os.makedirs(keep, exist_ok=True)
            for f in ("config.json", "generation_config.json", "tokenizer.json",
                      "tokenizer_config.json", "tokenizer.model", "README.md",
                      "chat_template.jinja"):
                if os.path.exists(os.path.join(d, f)):
                    shutil.copy(os.path.join(d, f), keep)
            write_kv(g, os.path.join(out, name + ".kv"))


def write_kv(g, path):
    """NAME.kv of a converted file (see the top of this file)."""
    params = gguf.GGUFReader(g)
    n_params = sum(int(t.n_elements) for t in params.tensors)
    with open(path, "w") as f:
        f.write(f"# params {n_params}\n")
        for key, vt, raw in kv_spans(g):
            if len(raw) > 16384:
                # large values by hash: length and SHA-256 of the bytes
                f.write(f"{key}\t{vt}\tsha256:{len(raw)}:{hashlib.sha256(raw).hexdigest()}\n")
            else:
                f.write(f"{key}\t{vt}\t{raw.hex()}\n")
        # the tensors convert made up from the config, in its order
        for i, t in enumerate(params.tensors):
            if t.name.startswith("rope_"):
                v = np.array(t.data, dtype=np.float32).reshape(-1)
                f.write(f"# tensor {i} {t.name} {v.size} {v.tobytes().hex()}\n")


def main_full(out):
    """The real vocabularies as tokenizer.json files: the vocabulary,
    merges and added tokens of llama.cpp's ggml-vocab-NAME.gguf, the rest
    (normalizer, pre-tokenizer, post-processor, decoder, model options)
    from the family's file in testdata/tokenizers/encode; NAME.pre gets
    the name convert's own get_vocab_base_pre gives its transformers
    tokenizer (an error when the hash is not in the table)."""
    sys.path.insert(0, os.path.join(REF, "src"))
    from conversion import base
    os.makedirs(out, exist_ok=True)
    for name, fam, bos in (("llama-bpe", "llama3", "<|begin_of_text|>"), ("qwen2", "qwen2", None)):
        r = gguf.GGUFReader(os.path.join(REF, "src", "models", f"ggml-vocab-{name}.gguf"))
        f = r.fields
        toks = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode() for i in f["tokenizer.ggml.tokens"].data]
        types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
        merges = [bytes(f["tokenizer.ggml.merges"].parts[i]).decode() for i in f["tokenizer.ggml.merges"].data]
        with open(os.path.join(TOKS, fam, "tokenizer.json")) as fh:
            tj = json.load(fh)
        vocab, added = {}, []
        for i, (t, ty) in enumerate(zip(toks, types)):
            if ty in (3, 4):
                added.append(dict(id=i, content=t, single_word=False, lstrip=False, rstrip=False,
                                  normalized=ty == 4, special=ty == 3))
            elif ty != 5:
                vocab[t] = i
        tj["added_tokens"] = added
        tj["model"]["vocab"] = vocab
        tj["model"]["merges"] = [m.split(" ", 1) for m in merges]
        if bos:
            bid = toks.index(bos)
            for pp in tj["post_processor"].get("processors", [tj["post_processor"]]):
                if pp["type"] == "TemplateProcessing":
                    pp["special_tokens"] = {bos: dict(id=bos, ids=[bid], tokens=[bos])}
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w") as fh:
            json.dump(tj, fh, ensure_ascii=False)
        shutil.copy(os.path.join(TOKS, fam, "tokenizer_config.json"), d)
        tok = transformers.AutoTokenizer.from_pretrained(d)
        pre = base.TextModel.get_vocab_base_pre(None, tok)
        with open(os.path.join(out, name + ".pre"), "w") as fh:
            fh.write(pre + "\n")
        print(name, pre)
        # a tiny model over the whole vocabulary, converted: NAME-model/
        # and NAME-model.kv as for the small models
        md = os.path.join(out, name + "-model")
        torch.manual_seed(7)
        if fam == "llama3":
            cfg = T.LlamaConfig(**dict(BASE, vocab_size=len(toks), bos_token_id=toks.index(bos),
                                       eos_token_id=toks.index("<|eot_id|>")))
            model = T.LlamaForCausalLM(cfg)
        else:
            cfg = T.Qwen2Config(**dict(BASE, vocab_size=len(toks), tie_word_embeddings=True,
                                       eos_token_id=toks.index("<|im_end|>")))
            model = T.Qwen2ForCausalLM(cfg)
        model.to(torch.float32).save_pretrained(md, safe_serialization=True)
        gp = os.path.join(md, "generation_config.json")
        if os.path.exists(gp):
            os.remove(gp)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(d, f), md)
        with tempfile.TemporaryDirectory() as tmp:
            g = os.path.join(tmp, "m.gguf")
            convert(md, g, "none")
            write_kv(g, os.path.join(out, name + "-model.kv"))
        os.remove(os.path.join(md, "model.safetensors"))


def main():
    if sys.argv[1] == "--full":
        main_full(sys.argv[2])
    else:
        main_small(sys.argv[1])


if __name__ == "__main__":
    main()
