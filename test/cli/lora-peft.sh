# PEFT adapters mergekit 0.1.5 merges and mk once refused, against
# mergekit's own merges (testdata/lora-peft, scripts/lora-peft-golden.py):
# DoRA (linear layers: norms of W's rows; the embedding: of its columns),
# lora_bias (the layer's bias + s·lora_B.bias), a LoRA of lm_head on a base
# that ties it to the embedding (the embedding changes, no lm_head
# written), lora_B biases without lora_bias (dropped, as PEFT drops them),
# a bfloat16 base, and --lora-merge-dtype float32 on it (the sum kept in
# float32).  Metric: the same tensor names and dtypes; float32 tensors
# max|mk - mergekit| <= 1e-6 * max(1, max|mergekit|) per tensor; bfloat16
# elements at most one ulp apart (ordered bit patterns; they are equal
# today, sgemm's order of B·A's sums against torch's could move one).
# Also through the stages with small chunks (DoRA's norms are
# taken over the whole weight first) and the refusals left.
. "$MK_TOP/test/cli/lib.inc"
command -v python3 >/dev/null 2>&1 || exit 77
td=$MK_TOP/testdata/lora-peft

mk-gen-model --arch qwen2 --tied --dtype F32 --layers 2 --hidden 16 --inter 32 --vocab 32 --seed 301 qt > /dev/null
mk-gen-model --dtype BF16 --layers 2 --hidden 16 --inter 32 --vocab 32 --seed 302 bb > /dev/null
if command -v sha256sum > /dev/null 2>&1; then
	sha256sum -c "$td/bases.sha256" > /dev/null ||
		fail "mk-gen-model no longer makes the bases the golden files were made from (scripts/lora-peft-golden.py)"
fi
for a in "$td"/ad-*; do cp -r "$a" .; done

compare() {   # compare GOT GOLDEN
	python3 - "$1/model.safetensors" "$2/model.safetensors" <<'PY'
import json, struct, sys
def load(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); h.pop("__metadata__", None)
    base = 8 + n; out = {}
    for k, v in h.items():
        f.seek(base + v["data_offsets"][0]); raw = f.read(v["data_offsets"][1] - v["data_offsets"][0])
        if v["dtype"] == "F32":
            out[k] = ("F32", struct.unpack("<%df" % (len(raw) // 4), raw))
        elif v["dtype"] == "BF16":
            out[k] = ("BF16", struct.unpack("<%dH" % (len(raw) // 2), raw))
        else:
            sys.exit("%s: %s is %s" % (p, k, v["dtype"]))
    return out
got, ref = load(sys.argv[1]), load(sys.argv[2])
if set(got) != set(ref):
    sys.exit("tensors differ: mk only %s, mergekit only %s" % (sorted(set(got) - set(ref)), sorted(set(ref) - set(got))))
def ordered(b):   # bf16 bits as integers in the order of their values
    return (b & 0x7FFF) * (-1 if b & 0x8000 else 1)
worst, ulps, bad = 0.0, 0, []
for k in sorted(ref):
    (dg, g), (dr, r) = got[k], ref[k]
    if dg != dr:
        bad.append("%s is %s, mergekit's %s" % (k, dg, dr)); continue
    if dr == "F32":
        rel = max(abs(x - y) for x, y in zip(g, r)) / max(1.0, max(abs(y) for y in r))
        worst = max(worst, rel)
        if rel > 1e-6: bad.append("%s: relative %.3g" % (k, rel))
    else:
        u = max(abs(ordered(x) - ordered(y)) for x, y in zip(g, r))
        ulps = max(ulps, u)
        if u > 1: bad.append("%s: %d bf16 ulps" % (k, u))
print("%d tensors, float32 worst relative %.3g, bfloat16 worst %d ulps" % (len(ref), worst, ulps))
sys.exit("; ".join(bad) if bad else 0)
PY
}

# case: adapter, base, --lora-merge-dtype (as scripts/lora-peft-golden.py)
n=0
while read -r case ad base md; do
	printf 'merge_method: passthrough\nmodels:\n  - model: %s+ad-%s\n' "$base" "$ad" > "$case.yml"
	[ "$md" = - ] && md=
	mk-yaml --quiet ${md:+--lora-merge-dtype "$md"} "$case.yml" "out-$case" 2> err.txt ||
		{ cat err.txt >&2; fail "$case: mk-yaml refused it"; }
	printf '%s: ' "$case"
	compare "out-$case" "$td/golden/$case" || fail "$case: mk's merge differs from mergekit's"
	n=$((n + 1))
done <<EOF
dora dora qt -
bias bias qt -
head head qt -
xbias xbias qt -
bf bf bb -
bf-f32 bf bb float32
bfdora bfdora bb -
bfdora-f32 bfdora bb float32
EOF
[ "$n" = 8 ] || fail "ran $n cases, not 8"

# the golden files can fail the comparison: the plain LoRA of the DoRA
# adapter (use_dora false: the magnitudes dropped) is another merge
sed 's/"use_dora": true/"use_dora": false/' ad-dora/adapter_config.json > cfg.json
mkdir -p ad-plain && cp ad-dora/adapter_model.safetensors ad-plain/ && mv cfg.json ad-plain/adapter_config.json
grep -q '"use_dora": false' ad-plain/adapter_config.json || fail "could not make the plain adapter"
printf 'merge_method: passthrough\nmodels:\n  - model: qt+ad-plain\n' > plain.yml
mk-yaml --quiet plain.yml out-plain
if compare out-plain "$td/golden/dora" > /dev/null 2>&1; then fail "a LoRA without DoRA's magnitudes passed as the DoRA merge"; fi
# ... and the lora_B biases are dropped: xbias's merge is not bias's
if compare out-xbias "$td/golden/bias" > /dev/null 2>&1; then fail "xbias's merge (biases dropped) equals bias's"; fi

# mk-plan says what each input gets
mk-plan --explain dora.yml > explain.txt
grep -q "q_proj.weight + 2·B·A, DoRA (rows' norms)" explain.txt || { cat explain.txt; fail "explain lacks q_proj's DoRA"; }
grep -q "embed_tokens.weight (the adapter's base_model.model.model.embed_tokens.base_layer.weight) + 2·(B·A)ᵀ, DoRA (columns' norms)" explain.txt ||
	{ cat explain.txt; fail "explain lacks the embedding's DoRA"; }
mk-plan --explain bias.yml > explain.txt
grep -q "q_proj.bias + 2·lora_B.bias" explain.txt || { cat explain.txt; fail "explain lacks q_proj's bias"; }

# through the stages, with 1 KiB chunks (the 2 KiB embedding in two: its
# DoRA column norms span chunks), byte for byte the one-process merge; and --lora-merge-dtype's
# float32 chunks of a bfloat16 base through the pipe
for case in dora bias head bf-f32 bfdora-f32; do
	md=
	case $case in *-f32) md=float32 ;; esac
	mk-plan ${md:+--lora-merge-dtype $md} "$case.yml" | mk-fetch --chunk-size 1KiB | mk-merge | mk-pack "st-$case"
	cmp "out-$case/model.safetensors" "st-$case/model.safetensors" || fail "$case: the staged merge differs"
done
mk-plan --lora-merge-dtype float32 bf-f32.yml | mk-cat | grep -q '"dtype":"F32"' || fail "the plan's lora carries no dtype"

# refusals left, at the reference, naming the adapter
printf 'merge_method: passthrough\nmodels:\n  - model: qt+ad-nobias\n' > nobias.yml
expect_fail 1 "but the base model has no 'model.layers.0.self_attn.o_proj.bias'" mk-plan -o /dev/null nobias.yml
grep -q "nobias.yml:3:12: " err.txt || { cat err.txt; fail "not said at the reference"; }
# modules_to_save of a tied lm_head: PEFT's copy unties it
mkdir ad-save
python3 - ad-head ad-save <<'PY'
import json, struct, sys
src, dst = sys.argv[1], sys.argv[2]
f = open(src + "/adapter_model.safetensors", "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
v = h["base_model.model.lm_head.base_layer.weight"]; f.seek(8 + n + v["data_offsets"][0])
raw = f.read(v["data_offsets"][1] - v["data_offsets"][0])
hj = json.dumps({"base_model.model.lm_head.weight": dict(v, data_offsets=[0, len(raw)])}).encode()
hj += b" " * (-len(hj) % 8)
open(dst + "/adapter_model.safetensors", "wb").write(struct.pack("<Q", len(hj)) + hj + raw)
c = json.load(open(src + "/adapter_config.json")); c["target_modules"] = ["q_proj"]; c["modules_to_save"] = ["lm_head"]
json.dump(c, open(dst + "/adapter_config.json", "w"))
PY
printf 'merge_method: passthrough\nmodels:\n  - model: qt+ad-save\n' > save.yml
expect_fail 1 "replaces lm_head, which the base ties to its input embedding" mk-plan -o /dev/null save.yml
# DoRA with a magnitude missing
python3 - ad-dora ad-nomag <<'PY'
import json, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst)
f = open(src + "/adapter_model.safetensors", "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); h.pop("__metadata__", None)
data = f.read(); out = {}; blob = b""
for k, v in sorted(h.items()):
    if k == "base_model.model.model.layers.1.self_attn.o_proj.lora_magnitude_vector":
        continue
    raw = data[v["data_offsets"][0]:v["data_offsets"][1]]
    out[k] = dict(v, data_offsets=[len(blob), len(blob) + len(raw)]); blob += raw
hj = json.dumps(out).encode(); hj += b" " * (-len(hj) % 8)
open(dst + "/adapter_model.safetensors", "wb").write(struct.pack("<Q", len(hj)) + hj + blob)
open(dst + "/adapter_config.json", "w").write(open(src + "/adapter_config.json").read())
PY
printf 'merge_method: passthrough\nmodels:\n  - model: qt+ad-nomag\n' > nomag.yml
expect_fail 1 "module 'model.layers.1.self_attn.o_proj' has no lora_magnitude_vector" mk-plan -o /dev/null nomag.yml
echo "lora-peft: ok"
