# tokenizer_source and tokenizer: the merged vocabulary, the embeddings
# aligned to it row by row (tokens:, force, padding), the files written
# for it, and the mistakes mk-plan says before any weight is read.  The
# tensors are checked against their definition, computed here from the
# inputs (float32 models; a linear merge: each output row is the
# weighted mean of the aligned input rows, to 1e-6 of the largest value,
# float32 rounding of a three-term sum being far below that).
. "$MK_TOP/test/cli/lib.inc"

# --- vocabularies that are the same: the plain merge, the source's files
tokjson() { # tokjson DIR EXTRA: an 8-token BPE tokenizer.json, the last two added
	printf '{"version": "1.0", "added_tokens": [{"id": 6, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}, {"id": 7, "content": "%s", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}], "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5}, "merges": ["a b", "b c", "ab c"]}}\n' "$2" > "$1/tokenizer.json"
	printf '{\n  "bos_token": "<s>",\n  "model_max_length": %s\n}\n' "${3:-2048}" > "$1/tokenizer_config.json"
}
mk-gen-model --layers 2 --vocab 8 --seed 1 tok-a > /dev/null
mk-gen-model --layers 2 --vocab 8 --seed 2 tok-b > /dev/null
mk-gen-model --layers 2 --vocab 8 --seed 3 tok-c > /dev/null
tokjson tok-a "</s>"
tokjson tok-b "</s>" 4096
tokjson tok-c "<|im_start|>"
printf 'merge_method: linear\nmodels:\n  - model: tok-a\n    parameters: {weight: 1}\n  - model: tok-b\n    parameters: {weight: 1}\n' > tok-plain.yml
mk-yaml tok-plain.yml tok-plain
for src in "tokenizer_source: base" "tokenizer_source: union" "tokenizer_source: tok-b" "tokenizer: {source: union}" \
	   "tokenizer:\n  source: tok-b"; do
	rm -rf tok-out
	printf 'merge_method: linear\nmodels:\n  - model: tok-a\n    parameters: {weight: 1}\n  - model: tok-b\n    parameters: {weight: 1}\n'"$src"'\n' > tok.yml
	mk-yaml tok.yml tok-out || fail "$src: refused over equal vocabularies"
	cmp tok-out/model.safetensors tok-plain/model.safetensors || fail "$src: the tensors differ from the plain merge"
	case $src in *tok-b*) d=tok-b ;; *) d=tok-a ;; esac
	for f in tokenizer.json tokenizer_config.json; do
		cmp tok-out/$f $d/$f || fail "$src: $f is not $d's"
	done
done

# --- vocabularies that differ: a base (62 regular tokens, <s> </s>), a
# chat fine-tune with ChatML tokens (66), a model whose regular tokens
# overlap the base's partly (from the 11th on), all float32
mk-gen-model --seed 1 --vocab 64 --dtype F32 --bpe-tokenizer v-base > /dev/null
mk-gen-model --seed 2 --vocab 66 --dtype F32 --bpe-tokenizer='<s>,</s>,<|im_start|>,<|im_end|>' v-chat > /dev/null
mk-gen-model --seed 3 --vocab 64 --dtype F32 --tok-skip 10 --bpe-tokenizer v-skip > /dev/null
cat > union.yml <<YML
merge_method: linear
base_model: v-base
models:
  - model: v-base
    parameters: {weight: 0.5}
  - model: v-chat
    parameters: {weight: 0.3}
  - model: v-skip
    parameters: {weight: 0.2}
tokenizer:
  source: union
  pad_to_multiple_of: 16
  tokens:
    <|im_start|>:
      source: v-chat
      force: true
    "a":
      source: {kind: zero}
    "Z":
      source: {kind: model_token, model: v-skip, token_id: 3}
    "<tool>":
      source: {kind: model_token, model: v-chat, token: "<|im_end|>"}
YML
mk-yaml union.yml union-out
# the vocabulary: the base's 64, v-skip's 10 new regular tokens, the
# ChatML pair, <tool>: 77 tokens, 80 rows
python3 - union-out v-base v-chat v-skip <<'PY' || fail "union: the merged vocabulary or its rows are wrong"
import json, struct, sys
out, base, chat, skip = sys.argv[1:]
def tensors(d):
    raw = open(d + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    res = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (d, k, v["dtype"])
        if len(v["shape"]) != 2:
            continue
        b, e = v["data_offsets"]
        flat = struct.unpack("<%df" % ((e - b) // 4), raw[8 + n + b:8 + n + e])
        cols = v["shape"][1]
        res[k] = [flat[i:i + cols] for i in range(0, len(flat), cols)]
    return res
def vocab(d):
    t = json.load(open(d + "/tokenizer.json"))
    v = dict(t["model"]["vocab"])
    for a in t["added_tokens"]:
        v[a["content"]] = a["id"]
    return v
V = vocab(out)
assert len(V) == 77, len(V)
assert json.load(open(out + "/config.json"))["vocab_size"] == 80
vb, vc, vs = vocab(base), vocab(chat), vocab(skip)
for t, i in vb.items():
    assert V[t] == i, ("base ids kept", t)
ids = sorted((i, t) for t, i in V.items())
assert [t for i, t in ids[64:74]] == list("abcdefghij"), ids[64:74]
assert [t for i, t in ids[74:]] == ["<|im_start|>", "<|im_end|>", "<tool>"], ids[74:]
O, B, C, S = tensors(out), tensors(base), tensors(chat), tensors(skip)
models = [(0.5, vb, B), (0.3, vc, C), (0.2, vs, S)]
def close(x, y, what):
    m = max(1.0, max(abs(v) for v in y))
    assert all(abs(a - b) <= 1e-6 * m for a, b in zip(x, y)), what
for name in ("model.embed_tokens.weight", "lm_head.weight"):
    o = O[name]
    assert len(o) == 80, (name, len(o))
    merged = []
    for t, i in sorted(V.items(), key=lambda x: x[1]):
        have = [M[name][v[t]] for w, v, M in models if t in v]
        forced = t == "<|im_start|>"
        # the row a model lacking t takes (mergekit's rules)
        if t == "a":
            fill = [0.0] * 64
        elif t == "<|im_start|>":
            fill = C[name][vc[t]]
        elif t == "Z":
            fill = S[name][3]
        elif t == "<tool>":
            fill = C[name][vc["<|im_end|>"]]
        elif len(have) == 1:
            fill = have[0]
        elif t in vb:
            fill = B[name][vb[t]]
        else:
            fill = [sum(r[k] for r in have) / len(have) for k in range(64)]
        rows = [M[name][v[t]] if t in v and not forced else fill for w, v, M in models]
        want = [sum(w * r[k] for (w, v, M), r in zip(models, rows)) for k in range(64)]
        close(o[i], want, (name, t))
        merged.append(o[i])
    # padding rows: each model's mean of its aligned rows, merged (linear):
    # the mean of the merged rows
    mean = [sum(r[k] for r in merged) / 77 for k in range(64)]
    for i in range(77, 80):
        close(o[i], mean, (name, "padding", i))
PY
# every input byte is read once: here every row of the three models is
# in the vocabulary, so the bytes read are the models' tensor bytes, and
# the one row <tool> takes from another token (<|im_end|>) again, where
# it is needed: 64 floats in each of the two embeddings
mk-plan union.yml > union.plan
mk-fetch -v -i union.plan -o union.inputs 2>fetch-err.txt
read_bytes=$(sed -n 's/.* chunks, \([0-9]*\) bytes read.*/\1/p' fetch-err.txt)
want=$(python3 - v-base v-chat v-skip <<'PY'
import struct, sys, os
print(2 * 64 * 4 + sum(os.path.getsize(d + "/model.safetensors") - 8 - struct.unpack("<Q", open(d + "/model.safetensors", "rb").read(8))[0] for d in sys.argv[1:]))
PY
)
[ "$read_bytes" = "$want" ] || fail "mk-fetch read $read_bytes bytes, the models hold $want"
# a saved stream replays to the same bytes, and the pipe matches mk-yaml
mk-merge < union.inputs > union.t1
mk-merge < union.inputs > union.t2
cmp union.t1 union.t2 || fail "a saved inputs stream merged twice differs"
mk-pack union-pipe < union.t1
cmp union-pipe/model.safetensors union-out/model.safetensors || fail "the pipe and mk-yaml differ"
mk-cat union.plan | grep -q '"vocab"' || fail "mk-cat shows no vocabulary of a job"
# tokenizer files: the new tokens added, the rest as the base's
python3 - union-out v-base <<'PY' || fail "union: tokenizer files"
import json, sys
out, base = sys.argv[1:]
t, b = json.load(open(out + "/tokenizer.json")), json.load(open(base + "/tokenizer.json"))
assert t["model"] == b["model"]
assert t["added_tokens"][:2] == b["added_tokens"]
new = {a["content"]: a for a in t["added_tokens"][2:]}
assert new["<|im_start|>"]["special"] and not new["a"]["special"] and new["a"]["normalized"]
assert not new["<tool>"]["special"]
c = json.load(open(out + "/tokenizer_config.json"))
assert c["added_tokens_decoder"]["74"]["content"] == "<|im_start|>"
assert c["model_max_length"] == 1000000000000000019884624838656
PY

# a method with statistics passes, held in memory, spilled, streamed: the
# same bytes (the fills, the averages and the padding means do not depend
# on how the rows come)
cat > ties.yml <<YML
merge_method: ties
base_model: v-base
models:
  - model: v-chat
    parameters: {weight: 0.6, density: 0.5}
  - model: v-skip
    parameters: {weight: 0.4, density: 0.7}
tokenizer:
  source: union
  pad_to_multiple_of: 16
  tokens:
    <|im_start|>: {source: v-chat, force: true}
    "<tool>": {source: {kind: model_token, model: v-chat, token: "<|im_end|>"}}
YML
mk-yaml ties.yml ties-held
# (a 16K merge budget: the embedding jobs, 61K each, are spilled or sent
# once per pass; 4K chunks: many ranges a row run or fill cuts)
mk-plan --max-memory 16K --spill ties.yml > ties-spill.plan
mk-cat ties-spill.plan | grep '"vocab"' | grep -q '"spill":true' || fail "ties: no spilled vocabulary job"
mk-fetch --chunk-size 4K < ties-spill.plan | mk-merge --spill . | mk-pack ties-spill
mk-plan --max-memory 16K ties.yml | mk-fetch --chunk-size 4K | mk-merge | mk-pack ties-stream
for o in ties-spill ties-stream; do
	cmp ties-held/model.safetensors $o/model.safetensors || fail "ties: $o differs from the held merge"
done

# tied embeddings (no lm_head), bfloat16, slerp over a union
mk-gen-model --seed 5 --vocab 64 --dtype BF16 --tied --tok-skip 5 --bpe-tokenizer v-tied-a > /dev/null
mk-gen-model --seed 6 --vocab 64 --dtype BF16 --tied --bpe-tokenizer='<s>,</s>,<pad>' v-tied-b > /dev/null
slerp_config tied.yml v-tied-a v-tied-b
printf 'tokenizer_source: union\n' >> tied.yml
mk-yaml tied.yml tied-out
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); assert c["vocab_size"] == 70 and c["tie_word_embeddings"], c' \
	tied-out/config.json || fail "tied: vocab_size"

# a base whose tokenizer is longer than its vocab size: cut to it
mk-gen-model --seed 4 --vocab 64 --tok-size 66 --dtype F32 --bpe-tokenizer='<s>,</s>,<|x|>,<|y|>' v-long > /dev/null
printf 'merge_method: linear\nbase_model: v-long\nmodels:\n  - model: v-long\n    parameters: {weight: 1}\n  - model: v-chat\n    parameters: {weight: 1}\ntokenizer_source: base\n' > strip.yml
mk-yaml strip.yml strip-out
python3 - strip-out <<'PY' || fail "strip: the base's tokens past its vocab size are not cut"
import json, sys
t = json.load(open(sys.argv[1] + "/tokenizer.json"))
assert [a["content"] for a in t["added_tokens"]] == ["<s>", "</s>"], t["added_tokens"]
assert json.load(open(sys.argv[1] + "/config.json"))["vocab_size"] == 64
PY

# --- mistakes: said by mk-plan at the key, before any weight is read; no OUT
tokcfg() { # tokcfg TOKENS-ENTRY
	printf 'merge_method: linear\nmodels:\n  - model: v-base\n    parameters: {weight: 1}\n  - model: v-chat\n    parameters: {weight: 1}\ntokenizer:\n  source: union\n  tokens:\n    "<x>": %s\n' "$1" > bad.yml
}
tokcfg '{source: tok-a}'
expect_fail 1 "bad.yml:10:12: tokenizer.tokens.<x>: tokens: '<x>' takes its embedding from model 'tok-a', which is not in the merge" mk-yaml bad.yml bad-out
no_out bad-out
tokcfg '{source: {kind: model_token, model: v-chat, token: "<nope>"}}'
expect_fail 1 "tokens: '<x>' takes the embedding of token '<nope>', which model 'v-chat' does not have" mk-yaml bad.yml bad-out
no_out bad-out
tokcfg '{source: {kind: model_token, model: v-chat, token_id: 66}}'
expect_fail 1 "tokens: '<x>': token id 66 is outside model 'v-chat''s model.embed_tokens.weight (66 rows)" mk-yaml bad.yml bad-out
no_out bad-out
tokcfg '{source: v-base, force: true}'
expect_fail 1 "tokens: '<x>' takes its embedding from model 'v-base', which does not have the token" mk-yaml bad.yml bad-out
no_out bad-out
printf 'merge_method: linear\nmodels:\n  - model: tok-a\n    parameters: {weight: 1}\ntokenizer_source: tok-c\n' > tok.yml
expect_fail 1 "the tokenizer source is not one of the merged models" mk-plan tok.yml
cp -r tok-b tok-broken && printf '{"model": {"type": "BPE", "vocab": {"a": 0,}}}' > tok-broken/tokenizer.json
printf 'merge_method: linear\nmodels:\n  - model: tok-a\n    parameters: {weight: 1}\n  - model: tok-broken\n    parameters: {weight: 1}\ntokenizer_source: base\n' > tok.yml
expect_fail 1 "model 'tok-broken': tok-broken/tokenizer.json:1:44: a comma before the closing bracket" mk-yaml tok.yml bad-out
no_out bad-out
# a model with only a SentencePiece tokenizer.model: read with
# libsentencepiece; one that is not a model is refused naming the file
cp -r tok-b tok-sp && rm tok-sp/tokenizer.json && printf 'not a real model\n' > tok-sp/tokenizer.model
printf 'merge_method: linear\nmodels:\n  - model: tok-a\n    parameters: {weight: 1}\n  - model: tok-sp\n    parameters: {weight: 1}\ntokenizer_source: union\n' > tok.yml
expect_fail 1 "model 'tok-sp': tok-sp/tokenizer.model: not a SentencePiece model" mk-yaml tok.yml bad-out
no_out bad-out
# a SentencePiece base (tokenizer.model copied, the new tokens written to
# tokenizer_config.json's added_tokens_decoder) with a chat model's tokens
mk-gen-model --dtype F32 --layers 2 --hidden 16 --vocab 48 --seed 7 --spm "$MK_TOP/testdata/tokenizers/spm-bpe-48.model" sp-a > /dev/null
mk-gen-model --dtype F32 --layers 2 --hidden 16 --vocab 50 --seed 8 --spm "$MK_TOP/testdata/tokenizers/spm-bpe-48.model" --spm-added '<|im_start|>,<|im_end|>' sp-b > /dev/null
printf 'merge_method: linear\nbase_model: sp-a\nmodels:\n  - model: sp-a\n    parameters: {weight: 1}\n  - model: sp-b\n    parameters: {weight: 1}\ntokenizer:\n  source: union\n  tokens:\n    "<tool>": {source: {kind: zero}}\n' > sp.yml
mk-yaml sp.yml sp-out
cmp sp-out/tokenizer.model sp-a/tokenizer.model || fail "spm: tokenizer.model not the base's"
[ ! -e sp-out/tokenizer.json ] || fail "spm: a tokenizer.json appeared"
python3 - sp-out <<'PY' || fail "spm: the merged vocabulary's tokens"
import json, sys
c = json.load(open(sys.argv[1] + "/tokenizer_config.json"))
d = {int(k): v["content"] for k, v in c["added_tokens_decoder"].items()}
assert d == {48: "<|im_start|>", 49: "<|im_end|>", 50: "<tool>"}, d
assert c["added_tokens_decoder"]["50"]["special"] is False
assert json.load(open(sys.argv[1] + "/config.json"))["vocab_size"] == 51
PY
# a model without any tokenizer: taken to have the base's (as mergekit), warned
cp -r tok-b tok-none && rm tok-none/tokenizer.json
printf 'merge_method: linear\nmodels:\n  - model: tok-a\n    parameters: {weight: 1}\n  - model: tok-none\n    parameters: {weight: 1}\ntokenizer_source: union\n' > tok.yml
mk-yaml tok.yml none-out 2>none-err.txt
grep -q "model 'tok-none' has no tokenizer: taken to have the base model's vocabulary" none-err.txt || fail "no warning for a model without a tokenizer"
printf 'merge_method: linear\nmodels:\n  - model: tok-a\n    parameters: {weight: 1}\n  - model: tok-none\n    parameters: {weight: 1}\n' > tok.yml
mk-yaml tok.yml none-plain
cmp none-out/model.safetensors none-plain/model.safetensors || fail "a model taken to have the base's vocabulary: not the plain merge"

# a legacy added_tokens.json: not read, as transformers 5 does not load it
# (nor mergekit), with a warning
cp -r sp-a sp-legacy
printf '{"<|im_start|>": 48, "<|im_end|>": 49}' > sp-legacy/added_tokens.json
printf 'merge_method: linear\nbase_model: sp-a\nmodels:\n  - model: sp-a\n    parameters: {weight: 1}\n  - model: sp-legacy\n    parameters: {weight: 1}\ntokenizer_source: union\n' > spl.yml
mk-yaml spl.yml spl-out 2> spl-err.txt
grep -q "model 'sp-legacy': its added_tokens.json is not read" spl-err.txt || fail "no warning for added_tokens.json"
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["vocab_size"] == 48' spl-out/config.json ||
	fail "added_tokens.json: its tokens were merged"
