#!/usr/bin/env python3
"""mk-gen-tokenizers.py - train one small tokenizer of each family mk's
encoder covers, with the `tokenizers` package's BPE trainer, and write the
ids `tokenizers` (and, for the MoE prompt batch, transformers) gives for
every line of a corpus.  Run with the conformance venv's python (it needs
tokenizers and transformers); `make check` only reads what it wrote.

  mk-gen-tokenizers.py [--vocab N] [--train FILE]... CORPUS OUTDIR

CORPUS: one JSON string a line.  For each family F it writes
OUTDIR/F/tokenizer.json, OUTDIR/F/tokenizer_config.json and
OUTDIR/F/golden.json: {"cases": [{"text", "ids", "ids_special"}],
"moe": {"prompts", "input_ids", "attention_mask"}} (ids: encode with
add_special_tokens false / true; moe: the prompts tokenised as
mergekit-moe does: the BOS text prepended, no special tokens, left
padding, pad = BOS else EOS).

The pre-tokenizer, normalizer, model options and post-processor of each
family are those of the public tokenizer.json files of that family:
  gpt2      ByteLevel(use_regex) + <|endoftext|>, plus an lstrip special
            token and a single_word normalized one (flag coverage)
  llama3    Split(Llama 3 regex) + ByteLevel, ignore_merges, BOS template
  qwen2     NFC, Split(Qwen2 regex) + ByteLevel, ChatML specials, no BOS
  llama2    Prepend("\u2581") + Replace(" ", "\u2581"), byte_fallback,
            fuse_unk, <unk> <s> </s>, BOS template (SentencePiece-style BPE)
  mistral   Metaspace(prepend_scheme first, split false), byte_fallback,
            BOS template (newer conversions of SentencePiece models)
"""
import argparse
import json
import os
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")
SP = "\u2581"


def byte_level(pre, special, vocab, train, added, post=None, normalizer=None, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train, tr)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special])
    if added:
        tok.add_tokens(added)
    tok.post_processor = post if post is not None else processors.ByteLevel(trim_offsets=False)
    return tok


def spm_bpe(vocab, train, metaspace):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="first", split=False)
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend(SP), normalizers.Replace(" ", SP)])
    tok.decoder = decoders.Sequence([decoders.Replace(SP, " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    # a small alphabet, so that rare characters take the byte fallback
    tr = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, show_progress=False, limit_alphabet=160,
                             special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(train, tr)
    # SentencePiece's layout: <unk> <s> </s>, the 256 byte pieces, the rest
    j = json.loads(tok.to_str())
    old = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    names = [k for k, _ in old[:3]] + ["<0x%02X>" % b for b in range(256)]
    names += [k for k, _ in old[3:] if k not in names]
    j["model"]["vocab"] = {k: i for i, k in enumerate(names)}
    for a in j["added_tokens"]:
        a["id"] = j["model"]["vocab"][a["content"]]
    j["post_processor"] = {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    return Tokenizer.from_str(json.dumps(j, ensure_ascii=False))


def families(vocab, train):
    l3_special = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                  "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    out = {}
    out["gpt2"] = (byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
                              ["<|endoftext|>"], vocab, train,
                              [AddedToken("<mask>", lstrip=True, special=True, normalized=False),
                               AddedToken("[NEW]", single_word=True, normalized=True, special=False)]),
                   {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"})
    l3 = byte_level(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)]),
        l3_special, vocab, train, None, ignore_merges=True)
    bos = l3.token_to_id("<|begin_of_text|>")
    l3.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    out["llama3"] = (l3, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})
    out["qwen2"] = (byte_level(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)]),
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], vocab, train, None, normalizer=normalizers.NFC()),
        {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"})
    out["llama2"] = (spm_bpe(vocab, train, False), {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    out["mistral"] = (spm_bpe(vocab, train, True), {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    # the other components mk covers, on tokenizers of no particular family
    a = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    a.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Strip(),
                                         normalizers.Replace(Regex(r"\s+"), " ")])
    a.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{P}"), behavior="merged_with_previous"),
        pre_tokenizers.Split("-", behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"[A-Z]+"), behavior="contiguous"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="always", split=True)])
    a.train_from_iterator(train, trainers.BpeTrainer(vocab_size=vocab // 2, min_frequency=2, show_progress=False,
                                                     special_tokens=["<unk>", "<cls>", "<sep>"] +
                                                     ["<0x%02X>" % b for b in range(256)]))
    a.post_processor = processors.RobertaProcessing(("<sep>", 2), ("<cls>", 1))
    out["misc-a"] = (a, {"bos_token": "<cls>", "eos_token": "<sep>"})
    b = Tokenizer(models.BPE())
    b.normalizer = normalizers.NFD()
    b.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[,;]"), behavior="removed", invert=False),
        pre_tokenizers.Split(Regex(r"\s+"), behavior="isolated", invert=True),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    b.train_from_iterator(train, trainers.BpeTrainer(vocab_size=vocab // 2, min_frequency=2, show_progress=False,
                                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    b.add_special_tokens(["[CLS]", "[SEP]"])
    b.add_tokens([AddedToken(" spaced ", normalized=False, special=False, rstrip=True),
                  AddedToken("café", normalized=True, special=False)])
    b.post_processor = processors.BertProcessing(("[SEP]", b.token_to_id("[SEP]")), ("[CLS]", b.token_to_id("[CLS]")))
    out["misc-b"] = (b, {"eos_token": "[SEP]"})
    return out


def read_corpus(path, train_files):
    """The corpus lines, and the training text: them three times, then
    the lines of each training file."""
    with open(path, encoding="utf-8") as f:
        corpus = [json.loads(l) for l in f if l.strip()]
    train = list(corpus) * 3
    for p in train_files:
        with open(p, encoding="utf-8", errors="replace") as f:
            train += f.read().splitlines()
    return corpus, train


MOE_PROMPTS = ["Write a poem about the sea", "def fib(n):", "机器学习", "<s> already a BOS",
               "Explain merging of language models step by step, briefly.", ""]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--train", action="append", default=[])
    ap.add_argument("corpus")
    ap.add_argument("outdir")
    a = ap.parse_args()
    corpus, train = read_corpus(a.corpus, a.train)
    import transformers
    for name, (tok, cfg) in families(a.vocab, train).items():
        d = os.path.join(a.outdir, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
        conf = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096, "clean_up_tokenization_spaces": False}
        conf.update(cfg)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(conf, f, indent=2, ensure_ascii=False)
            f.write("\n")
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids,
                  "ids_special": tok.encode(t, add_special_tokens=True).ids} for t in corpus]
        # mergekit-moe's prompt handling (mergekit/scripts/moe.py, moe/router.py)
        ht = transformers.AutoTokenizer.from_pretrained(d)
        ht.padding_side = "left"
        ht.pad_token_id = ht.bos_token_id
        if ht.pad_token_id is None:
            ht.pad_token = ht.eos_token
        enc = ht([(ht.bos_token or "") + p for p in MOE_PROMPTS], padding=True, add_special_tokens=False)
        g = {"family": name, "tokenizers_version": __import__("tokenizers").__version__,
             "transformers_version": transformers.__version__, "cases": cases,
             "moe": {"prompts": MOE_PROMPTS, "input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}}
        with open(os.path.join(d, "golden.json"), "w", encoding="utf-8") as f:
            json.dump(g, f, ensure_ascii=False)
            f.write("\n")
        print("%s: vocab %d" % (name, tok.get_vocab_size()), file=sys.stderr)


if __name__ == "__main__":
    main()
