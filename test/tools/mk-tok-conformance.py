#!/usr/bin/env python3
"""mk-tok-conformance.py - libmk's tokenizer against the `tokenizers`
package on tokenizers of real size: one of each family mk-gen-tokenizers.py
makes, trained to VOCAB tokens on TRAIN files, each encoding (with and
without special tokens) every line of the test corpus, every line of the
TEST files and RANDOM strings drawn (seeded) from a mix of scripts,
whitespace, digits of many kinds, combining marks, emoji sequences and the
families' special tokens.  Run with the conformance venv's python:

  mk-tok-conformance.py --tool build/tools/mk-tok-encode --corpus C \
      [--vocab N] [--random N] [--train F]... [--test F]... WORKDIR

Prints one line per family (lines compared, lines that differ, and the
first differences); exit 1 when any line differs.
"""
import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import unicodedata

POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    "     ", "\t\n\r\n\n\x0b\x0c", "\u00a0\u3000\u2009\u200b\u202f\u1680\u0085", "\u0301\u0308\u0303\u030a\u0327",
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年", "あいうえおかきくけこアイウエオカキクケコ漢字", "مرحبابالعالمعربي",
    "हिन्दीपाठ", "한국어텍스트", "ภาษาไทย", "ΑΒΓαβγЖжЯя", "éèêëàâäôöûüçñßÆØÅæøåİı",
    "١٢٣٤٥٦٧٨٩٠０１２３４５６７８９ⅠⅡⅢⅫ²³½①②", "😀🎉👍🏽👨\u200d👩\u200d👧❤️🇩🇪🇯🇵", "ＡＢＣｶﾀｶﾅﬁﬀ℃™",
    "\u2581\u0120\u010a", "\U0001d518\U0001d52b\U00013000\U0010fffd\ufffd\ue000",
]
WORDS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", " the", " and", "ing", "tion", "<0x41>", "<unk>",
         "<s>", "</s>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|eot_id|>", "<mask>",
         " <mask> ", "[NEW]", " [NEW] ", "x[NEW]", "def ", "return", "    ", "\n\n", "1234", "3.14"]


def known(c):
    from tokenizers import normalizers
    t = c + "\u0327" + c + "a\u0301"
    return all(getattr(normalizers, f)().normalize_str(t) == unicodedata.normalize(f, t)
               for f in ("NFC", "NFKC"))


def random_lines(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 24)):
            r = rng.random()
            if r < 0.15:
                parts.append(rng.choice(WORDS))
            elif r < 0.2:
                # any code point assigned in Python's Unicode version whose
                # normalization `tokenizers`' tables agree on (they lag for
                # some: U+10F82, Unicode 14, is a starter to them; ICU has it
                # as the mark it is), as libmk's ICU and PCRE2 tables do not
                # match tokenizers' release for release
                c = chr(rng.randint(0x20, 0x10ffff))
                if unicodedata.category(c) not in ("Cn", "Cs") and known(c):
                    parts.append(c)
            else:
                pool = rng.choice(POOLS)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))))
        out.append("".join(parts))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--vocab", type=int, default=4000)
    ap.add_argument("--random", type=int, default=2000)
    ap.add_argument("--train", action="append", default=[])
    ap.add_argument("--test", action="append", default=[])
    ap.add_argument("workdir")
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("gen", os.path.join(here, "mk-gen-tokenizers.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    from tokenizers import Tokenizer
    corpus, train = gen.read_corpus(a.corpus, a.train)
    lines = list(corpus)
    for p in a.test:
        with open(p, encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines += text.splitlines()
        lines += [text[i:i + 700] for i in range(0, len(text), 700)]  # newlines and indentation inside
    lines += random_lines(a.random, 1)
    train += random_lines(200, 2)
    failed = 0
    for name, (tok, cfg) in gen.families(a.vocab, train).items():
        d = os.path.join(a.workdir, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(dict(cfg, tokenizer_class="PreTrainedTokenizerFast"), f)
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        inp = "".join(json.dumps(l, ensure_ascii=False) + "\n" for l in lines).encode()
        r = subprocess.run([a.tool, d], input=inp, capture_output=True)
        if r.returncode:
            print("%s: mk-tok-encode failed: %s" % (name, r.stderr.decode().strip()))
            failed += 1
            continue
        got = r.stdout.decode().splitlines()
        bad = []
        for i, l in enumerate(lines):
            want = (tok.encode(l, add_special_tokens=False).ids, tok.encode(l, add_special_tokens=True).ids)
            g = tuple(json.loads(x) for x in got[i].split("\t")) if i < len(got) else None
            if g != want:
                bad.append((l, want[0], g[0] if g else None))
        print("%-8s vocab %5d: %d lines, %d differ" % (name, tok.get_vocab_size(), len(lines), len(bad)))
        for l, w, g in bad[:3]:
            print("   text %r\n   tokenizers %s\n   mk         %s" % (l[:120], w[:40], g[:40] if g else g))
        failed += bool(bad)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
