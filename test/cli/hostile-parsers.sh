# Hostile input to the parsers: a small file that would make a parser
# build without bound or work without end is refused quickly, exit 1,
# with a message naming the file and the bound it hit, no OUT, and a
# bounded peak RSS: torch.save pickles (data.pkl), tokenizer.json's
# encoder, YAML configurations and recipes; checkpoints with no tensors;
# messages that say what happened.
. "$MK_TOP/test/cli/lib.inc"
mk-gen-model --layers 1 --seed 1 a > /dev/null
# refuse MSG CMD...: exit 1 within 60 s, MSG on stderr, no OUT
refuse() {
	msg=$1
	shift
	expect_fail 1 "$msg" timeout 60 mk-rss rss "$@"
	no_out out
}

# --- torch.save pickles --------------------------------------------------
# gen.py MODE N FILE: a torch.save zip whose data.pkl is MODE repeated N
# times (runs of cheap opcodes, deep nesting, memo abuse, fan-out, strings
# longer than the file, N tiny tensors)
if command -v python3 >/dev/null 2>&1; then
cat > gen.py <<'PY'
import struct, sys, zipfile
mode, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
P = b"\x80\x02"
def u32(x): return struct.pack("<I", x)
def s(t): t = t.encode(); return b"\x8c" + bytes([len(t)]) + t
runs = {"none": b"N", "emptylist": b"]", "emptydict": b"}", "emptytuple": b")", "mark": b"(",
        "shortstr": b"\x8c\x02ab", "binint": b"J\x01\x02\x03\x04", "true": b"\x88"}
if mode in runs:
    pkl = P + runs[mode] * n + b"."
elif mode == "tensors":  # an OrderedDict of n one-element tensors, views of one storage
    b = [P, b"ccollections\nOrderedDict\nq\x00)Rq\x01("]
    for i in range(n):
        g = b"h\x02" if i else b"ctorch._utils\n_rebuild_tensor_v2\nq\x02"
        st = b"h\x03" if i else b"ctorch\nFloatStorage\nq\x03"
        b.append(s("t%d" % i) + g + b"((" + s("storage") + st + s("0") + s("cpu") + b"K\x01tQK\x00))\x89h\x00)RtR")
        if i % 1000 == 999:
            b.append(b"u(")
    pkl = b"".join(b) + b"u."
elif mode == "tuple1": pkl = P + b")" + b"\x85" * n + b"."
elif mode == "list": pkl = P + b"]" * n + b"a" * (n - 1) + b"."
elif mode == "memo": pkl = P + b"Nr" + u32(n) + b"."
elif mode == "binget": pkl = P + b"]q\x00" + b"h\x00" * n + b"."
elif mode == "fanout": pkl = P + b"]q\x00" + (b"(" + b"h\x00" * 1000 + b"t") * n + b"."
elif mode == "fandeep": pkl = P + b"]q\x00(" + b"h\x00" * 1000 + b"tq\x01" + (b"(" + b"h\x01" * 1000 + b"tq\x01") * n + b"."
elif mode == "bigstr": pkl = P + b"X" + u32(0xFFFFFFF0) + b"abc."
elif mode == "longstr": pkl = P + b"X" + u32(n) + b"a" * n + b"."
else: sys.exit("gen.py: mode?")
with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
    z.writestr("archive/data.pkl", pkl)
    z.writestr("archive/byteorder", "little")
    z.writestr("archive/data/0", b"\0" * 4)
PY
mkdir m
pkl() { # pkl MODE N: m/pytorch_model.bin that pickle; mk-fetch and mk-pytorch on it
	python3 gen.py "$1" "$2" m/pytorch_model.bin
}
# each case: MODE N, then what the refusal says after "data.pkl" (and a
# space, unless a colon); each in well under a second, its peak RSS under
# data.pkl's size (read whole) + 16 MiB: the budget for no tensors is 4096
# values and 1 MiB (70000 tensors: up to 65536 tensors' budget, 200 MB)
v=4096 b=1048576 deep="tuples, lists and dicts nested more than 64 deep"
while read -r mode n msg; do
	pkl $mode $n < /dev/null
	case $msg in :*) sep= ;; *) sep=' ' ;; esac
	refuse "m/pytorch_model.bin: data.pkl$sep$msg" mk-fetch --model m -o out < /dev/null
	bound=$(($(wc -c < m/pytorch_model.bin) / 1024 + 16384))
	[ "$mode" != tensors ] || bound=204800
	rss_under rss $bound "$mode $n"
done <<EOF
none 16000000  builds more than $v values for its 0 tensors
emptylist 16000000  builds more than $v values for its 0 tensors
emptydict 16000000  builds more than $v values for its 0 tensors
emptytuple 16000000  builds more than $v values for its 0 tensors
true 16000000  builds more than $v values for its 0 tensors
shortstr 10000000  builds more than $v values for its 0 tensors
binint 10000000  builds more than $v values for its 0 tensors
mark 16000000 : MARKs nested more than 64 deep
tuple1 1000 : $deep
list 1000 : $deep
fandeep 100 : $deep
fanout 10000  builds more than $b bytes for its 0 tensors
memo 4294967280 : a memo index of 4294967280, past the 1 values built
memo 9999999 : a memo index of 9999999, past the 1 values built
binget 16000000  builds more than $b bytes for its 0 tensors
bigstr 0 : cut short
longstr 2000000  builds more than $b bytes
longstr 70000000  is 70000008 bytes, more than 64 MiB
tensors 70000 : more than 65536 tensors
EOF
# mk-pytorch and mk-yaml say the same, and leave no OUT
printf 'merge_method: linear\nmodels:\n  - model: m/pytorch_model.bin\n    parameters: {weight: 1}\n' > sd.yml
refuse "m/pytorch_model.bin: data.pkl: more than 65536 tensors" mk-pytorch sd.yml out
# a few tensors are read
pkl tensors 3
mk-fetch --model m -o ok.mks
fi

# --- checkpoints with no tensors -------------------------------------------
# a safetensors header of only __metadata__, or of nothing; a .bin whose
# state dict is empty or holds no tensor; a model directory of such
# shards; every model of a merge empty: refused naming the file, no OUT
st_empty() { # st_empty FILE HEADER
	printf '%s' "$2" > hdr
	n=$(wc -c < hdr)
	printf "$(printf '\\%03o' $((n & 255)) $((n >> 8 & 255)) 0 0 0 0 0 0)" > "$1"
	cat hdr >> "$1"
}
st_empty meta.safetensors '{"__metadata__":{"format":"pt"}}'
st_empty none.safetensors '{}'
printf 'merge_method: linear\nmodels:\n  - model: meta.safetensors\n    parameters: {weight: 1}\n  - model: none.safetensors\n    parameters: {weight: 1}\n' > empty.yml
refuse "model 'meta.safetensors': ./meta.safetensors: no tensors" mk-pytorch empty.yml out
err_has "model 'none.safetensors': ./none.safetensors: no tensors" "the second empty model is not named"
refuse "./none.safetensors: no tensors" mk-fetch --model none.safetensors -o out
if command -v python3 >/dev/null 2>&1; then
	python3 - <<'PY'
import zipfile
for name, pkl in (("emptydict.bin", b"\x80\x02}q\x00."), ("ints.bin", b"\x80\x02}q\x00(\x8c\x01aK\x01\x8c\x01bK\x02u.")):
    with zipfile.ZipFile(name, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", "little")
PY
	printf 'merge_method: linear\nmodels:\n  - model: emptydict.bin\n    parameters: {weight: 1}\n' > bin.yml
	refuse "model 'emptydict.bin': ./emptydict.bin: no tensors" mk-pytorch bin.yml out
	refuse "./ints.bin: data.pkl's dict holds 'a', which is not a tensor" mk-fetch --model ints.bin -o out
fi
# a model directory: one shard, or an index that maps nothing
mkdir e1 e2
cp a/config.json e1/ && cp meta.safetensors e1/model.safetensors
cp a/config.json e2/ && cp none.safetensors e2/model-00001-of-00001.safetensors
echo '{"metadata": {}, "weight_map": {}}' > e2/model.safetensors.index.json
slerp_config e.yml e1 a
refuse "model 'e1': e1/model.safetensors: no tensors" mk-yaml e.yml out
refuse "model 'e1': e1/model.safetensors: no tensors" mk-plan e.yml -o out
slerp_config e.yml a e2
refuse "model 'e2': e2/model.safetensors.index.json: no tensors (its weight_map is empty)" mk-yaml e.yml out
# state dicts with no tensor in common, intersected: nothing to merge
cp a/model.safetensors x.safetensors
st_empty y.safetensors '{"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
printf '\0\0\0\0' >> y.safetensors
printf 'merge_method: linear\nmodels:\n  - model: x.safetensors\n    parameters: {weight: 1}\n  - model: y.safetensors\n    parameters: {weight: 1}\n' > xy.yml
refuse "no tensor to merge (no tensor is in every model" mk-pytorch -i xy.yml out

# --- tokenizer.json: what encoding a prompt may build ----------------------
# tok DIR NORMALIZER PRE_TOKENIZER POST_PROCESSOR: a BPE tokenizer over
# "a", "b", " " and <s> (the BOS) with those parts (JSON or null)
tok() {
	mkdir -p "$1"
	printf '{"version":"1.0","added_tokens":[{"id":3,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],"normalizer":%s,"pre_tokenizer":%s,"post_processor":%s,"decoder":null,"model":{"type":"BPE","vocab":{"a":0,"b":1," ":2,"<s>":3},"merges":[]}}' \
		"$2" "$3" "$4" > "$1/tokenizer.json"
	echo '{"bos_token": "<s>"}' > "$1/tokenizer_config.json"
}
# rules N RULE: a Sequence of N copies of RULE (JSON)
rules() {
	awk -v n="$1" -v r="$2" 'BEGIN { for (i = 0; i < n; i++) printf "%s%s", i ? "," : "", r; print "" }'
}
echo '"aab ab"' > short.txt
awk 'BEGIN { s = ""; for (i = 0; i < 20000; i++) s = s "ab "; print "\"" s "\"" }' > long.txt
# Replace rules that each double the text
tok dbl "{\"type\":\"Sequence\",\"normalizers\":[$(rules 40 '{"type":"Replace","pattern":{"String":"a"},"content":"aa"}')]}" null null
refuse "prompt 1: dbl/tokenizer.json: normalizer 15 (Replace) makes more than 66112 bytes of text from a text of 9 bytes (at most 64 times the text and 64 KiB): refused" \
	mk-tok-encode --prompts dbl < short.txt
rss_under rss 32768 "Replace rules doubling a prompt"
refuse "dbl/tokenizer.json: normalizer 8 (Replace) makes more than" mk-tok-encode --prompts dbl < long.txt
rss_under rss 32768 "Replace rules doubling a long prompt"
# Unicode forms run in pieces cut at the form's boundaries: what they make
# is held to the bound a piece at a time (four doublings then NFKC, whose
# U+FDFA becomes 18 characters), and the pieces give the text the whole
# would: 692 KB of combining marks, ligatures, Hangul jamo and wide forms
# encode to the ids of the tokenizers library (0.23.3; sha256 of the ids
# as compact JSON, stored when this test was written)
R='{"type":"Replace","pattern":{"String":"\ufdfa"},"content":"\ufdfa\ufdfa"}'
tok nf "{\"type\":\"Sequence\",\"normalizers\":[$R,$R,$R,$R,{\"type\":\"NFKC\"}]}" null null
python3 -c 'import json; print(json.dumps("\ufdfa" * 60000))' > fdfa.txt
refuse "nf/tokenizer.json: normalizer 5 (NFKC) makes more than" mk-tok-encode --prompts nf < fdfa.txt
rss_under rss 40960 "NFKC of 2.9 MB of U+FDFA"
python3 - > mix.txt <<'PY'
import json, random
random.seed(3)
parts = ['e\u0301', '\ufb01', 'A\u030a\u0323', '\u1100\u1161\u11a8', 'x', '\u2460', ' ', '\uff21',
         '\u00e9\u0327', '\u0390', '\ufdfa', '\u3000', '\U0001d400']
print(json.dumps(''.join(random.choice(parts) for _ in range(90000))))
PY
while read -r tk n sum; do
	mk-tok-encode "$MK_TOP/testdata/tokenizers/encode/$tk" < mix.txt > ids.txt
	python3 - ids.txt "$n" "$sum" <<'PY' || fail "$tk: the long text's ids differ from the tokenizers library's"
import hashlib, json, sys
ids, _ = json.JSONDecoder().raw_decode(open(sys.argv[1]).read())
got = (len(ids), hashlib.sha256(json.dumps(ids, separators=(",", ":")).encode()).hexdigest())
assert got == (int(sys.argv[2]), sys.argv[3]), got
PY
done <<EOF
misc-a 331984 a1a4b50d88c14eed28be76f25b3401dfccb05cfba915b66c63c79945d565e3e9
misc-b 357422 f767ad55bf0225d56bfe8b1c913e7f4add368f5a0a651f5683ae3e50cda8d52f
qwen2 226841 3ac500b1bd287ba31af9de13d2bb0db2b6b8c24cc2112dfc62e4e613c3776463
EOF
# the same by a regex, and by Prepend rules of 1000 bytes
tok dblre "{\"type\":\"Sequence\",\"normalizers\":[$(rules 40 '{"type":"Replace","pattern":{"Regex":"b"},"content":"bb"}')]}" null null
refuse "dblre/tokenizer.json: normalizer 16 (Replace) makes more than" mk-tok-encode --prompts dblre < short.txt
k=$(awk 'BEGIN { for (i = 0; i < 1000; i++) printf "a" }')
tok pre "{\"type\":\"Sequence\",\"normalizers\":[$(rules 200 "{\"type\":\"Prepend\",\"prepend\":\"$k\"}")]}" null null
refuse "pre/tokenizer.json: normalizer 67 (Prepend) makes more than" mk-tok-encode --prompts pre < short.txt
# a Metaspace replacement of 1000 bytes on a text of spaces; a Split into
# pieces of one byte (each a piece's cost too)
tok meta null "{\"type\":\"Metaspace\",\"replacement\":\"$k\",\"prepend_scheme\":\"always\",\"split\":true}" null
refuse "meta/tokenizer.json: pre-tokenizer 1 (Metaspace) makes more than" mk-tok-encode --prompts meta < long.txt
tok split "{\"type\":\"Sequence\",\"normalizers\":[$(rules 3 '{"type":"Replace","pattern":{"String":"a"},"content":"aa"}')]}" \
	'{"type":"Split","pattern":{"Regex":"."},"behavior":"Isolated","invert":false}' null
refuse "split/tokenizer.json: pre-tokenizer 1 (Split) makes more than" mk-tok-encode --prompts split < long.txt
# templates that each add 64 ids, 2000 times over
ids=$(awk 'BEGIN { for (i = 0; i < 64; i++) printf "%s3", i ? "," : "" }')
tmpl="{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[$ids],\"tokens\":[]}}}"
tok post null null "{\"type\":\"Sequence\",\"processors\":[$(rules 2000 "$tmpl")]}"
refuse "post/tokenizer.json: post-processor 1030 makes more than 65920 tokens" mk-tok-encode post < short.txt
# a normalized added token goes through the same normalizers, as loaded
tok addn "{\"type\":\"Sequence\",\"normalizers\":[$(rules 40 '{"type":"Replace","pattern":{"String":"<"},"content":"<<"}')]}" null null
sed -i 's/"normalized":false/"normalized":true/' addn/tokenizer.json
refuse "added token '<s>': addn/tokenizer.json: normalizer 17 (Replace) makes more than" mk-tok-encode --prompts addn < short.txt
# a prompt over the limit on text
awk 'BEGIN { s = "ab"; while (length(s) < 5000000) s = s s; print "\"" s "\"" }' > huge.txt
tok plain null null null
refuse "plain/tokenizer.json: a text of 8388611 bytes to encode, more than 4 MiB: refused" mk-tok-encode --prompts plain < huge.txt
# a regex that backtracks past PCRE2's match limit is reported as that,
# naming the rule, not as memory
tok bt null '{"type":"Split","pattern":{"Regex":"((a+)+)+[bd]"},"behavior":"Isolated","invert":false}' null
awk 'BEGIN { s = ""; for (i = 0; i < 5000; i++) s = s "a"; print "\"" s "c\"" }' > bt.txt
refuse "prompt 1: bt/tokenizer.json: pre-tokenizer 1 (Split): its pattern failed on the text: match limit exceeded" \
	mk-tok-encode --prompts bt < bt.txt
! grep -q "out of memory" err.txt || fail "a match limit reported as out of memory"
# ordinary prompts still encode
mk-tok-encode --prompts dbl < /dev/null > /dev/null
echo '"ab"' | mk-tok-encode --prompts plain > ok.json

# --- YAML: nesting, nodes, aliases -----------------------------------------
# deep (2 MB of '[' or '{', block lists, mixed), many nodes, many models,
# alias bombs: refused at once with one error naming the bound, through
# mk-plan, mk-yaml, mk-multi (a recipe of several documents) and mk-moe
awk 'BEGIN { s = "["; while (length(s) < 2000000) s = s s; print "merge_method: " s }' > deep-flow.yml
awk 'BEGIN { s = "{"; while (length(s) < 2000000) s = s s; print "models: " s }' > deep-map.yml
awk 'BEGIN { print "models:"; s = "  -"; for (i = 0; i < 5000; i++) { print s " x: "; s = "  " s } }' > deep-block.yml
awk 'BEGIN { s = "[{a: "; while (length(s) < 500000) s = s s; print "parameters: " s }' > deep-mixed.yml
for f in deep-flow deep-map deep-block deep-mixed; do
	refuse "$f.yml:" mk-plan $f.yml -o out
	err_has "lists and maps nested more than 64 deep" "$f: the depth bound not named"
	[ "$(wc -l < err.txt)" -eq 1 ] || { cat err.txt >&2; fail "$f: more than one error"; }
	rss_under rss 98304 "$f"
	refuse "lists and maps nested more than 64 deep" mk-yaml $f.yml out
	{ printf 'name: first\nmerge_method: linear\nmodels: [{model: a}]\n---\n'; cat $f.yml; } > recipe.yml
	refuse "lists and maps nested more than 64 deep" mk-multi recipe.yml -I inter --out-path out
	refuse "$f.yml:" mk-moe $f.yml out
	err_has "lists and maps nested more than 64 deep" "mk-moe: the depth bound not named"
done
# nesting of 64 is read (and found wrong for what it is, not refused)
awk 'BEGIN { s = ""; for (i = 0; i < 60; i++) s = s "["; t = ""; for (i = 0; i < 60; i++) t = t "]"; print "merge_method: linear\nmodels:\n  - model: a\n    parameters: {weight: " s "1" t "}" }' > d64.yml
expect_fail 1 "weight" mk-plan d64.yml -o out
! grep -q "nested more than" err.txt || fail "a nesting of 64 refused"
# 100 000 models (no aliases): the node bound, once; 5000: the models bound, once
awk 'BEGIN { print "merge_method: linear\nmodels:"; for (i = 0; i < 100000; i++) print "  - model: m" i "\n    parameters: {weight: 1}" }' > many.yml
refuse "many.yml:74900:5: more than 262144 YAML nodes" mk-plan many.yml -o out
[ "$(wc -l < err.txt)" -eq 1 ] || { cat err.txt >&2; fail "100000 models: more than one error"; }
! grep -q "through" err.txt || fail "100000 models said to expand through aliases"
awk 'BEGIN { print "merge_method: linear\nmodels:"; for (i = 0; i < 5000; i++) print "  - model: m" i "\n    parameters: {weight: 1}" }' > m5k.yml
refuse "m5k.yml:3:3: models: 5000 models, more than the 4096 mk merges at once" mk-plan m5k.yml -o out
[ "$(wc -l < err.txt)" -eq 1 ] || { cat err.txt >&2; fail "5000 models: more than one error"; }
# an alias bomb: 120 x 120 x 120 visits from a few kilobytes
awk 'BEGIN {
	printf "merge_method: linear\nx: &a [0"; for (i = 1; i < 120; i++) printf ",%d", i
	printf "]\nz: &c [{value: *a}"; for (i = 1; i < 120; i++) printf ",{value: *a}"
	printf "]\nmodels:\n  - model: m\n    parameters:\n"; for (i = 0; i < 120; i++) printf "      p%d: *c\n", i
}' > laughs.yml
refuse "laughs.yml:" mk-plan laughs.yml -o out
err_has "expands to more than 262144 nodes through its" "alias bomb: the bound not named"
rss_under rss 32768 "alias bomb"
awk 'BEGIN {
	print "base_model: a\np0: &p0 [x, x, x, x, x, x, x, x, x, x]\nexperts:"
	for (i = 0; i < 30000; i++) print "  - {source_model: a, positive_prompts: *p0}"
}' > moe-laughs.yml
refuse "expands to more than 262144 strings through aliases" mk-moe moe-laughs.yml out
