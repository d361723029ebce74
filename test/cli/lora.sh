# LoRA references (model: BASE+ADAPTER): mk-fetch sends W + s·B·A, which
# test/tools/mk-lora-check.py computes on its own (Python, double
# precision) from the base and the adapter; adapters from
# test/tools/mk-gen-lora.py.  The same merge from a saved plan through the
# stages, the merged copy a merge of BASE+ADAPTER equals, the refusals
# (at the reference, before any weight is read), --lora-merge-dtype, and
# mk-fetch's memory with a large LoRA-targeted weight.
. "$MK_TOP/test/cli/lib.inc"
command -v python3 >/dev/null 2>&1 || exit 77
GEN="python3 $MK_TOP/test/tools/mk-gen-lora.py"
CHECK="python3 $MK_TOP/test/tools/mk-lora-check.py"
pass() { printf 'merge_method: passthrough\nmodels:\n  - model: %s\n' "$1" > "$2"; }

mk-gen-model --seed 1 --layers 2 --dtype F32 f32
mk-gen-model --seed 2 --layers 2 --dtype F32 f32b
mk-gen-model --seed 3 --layers 2 bf16

# float32: rank and alpha patterns, an embedding LoRA, lm_head in modules_to_save
$GEN f32 ad1 --targets q_proj,v_proj,down_proj,embed_tokens --rank-pattern 'layers\.1\.self_attn\.q_proj=2' \
	--alpha-pattern down_proj=3 --save lm_head
pass f32+ad1 p1.yml
mk-yaml --quiet p1.yml o1
$CHECK f32 ad1 o1 | tee check.txt
grep -q " 8 adapted" check.txt || fail "ad1 should change 8 tensors"
# the check can fail: another adapter's values are not these
$GEN f32 ad1x --targets q_proj,v_proj,down_proj,embed_tokens --rank-pattern 'layers\.1\.self_attn\.q_proj=2' \
	--alpha-pattern down_proj=3 --save lm_head --seed 9
if $CHECK f32 ad1x o1 > /dev/null; then fail "mk-lora-check accepted another adapter's merge"; fi

# use_rslora, fan_in_fan_out (W taken as [in, out]) and an adapter in bfloat16
$GEN f32 ad2 --targets q_proj,o_proj,up_proj,gate_proj --r 8 --alpha 16 --rslora --fan-in-fan-out --dtype BF16
pass f32+ad2 p2.yml
mk-yaml --quiet p2.yml o2
$CHECK f32 ad2 o2

# a bfloat16 base: the sum in float32, rounded once to bfloat16
$GEN bf16 ad3 --targets q_proj,k_proj,down_proj,embed_tokens --r 6 --alpha 3 --save lm_head
pass bf16+ad3 p3.yml
mk-yaml --quiet p3.yml o3
$CHECK bf16 ad3 o3

# mk-plan says what each input gets
mk-plan --explain p1.yml > explain.txt
grep -q "q_proj.weight + 2·B·A" explain.txt || { cat explain.txt; fail "explain lacks the LoRA of q_proj (scale 8/4 = 2)"; }
grep -q "the adapter's base_model.model.lm_head.weight" explain.txt || fail "explain lacks lm_head's replacement"

# in a merge, BASE+ADAPTER is the merged copy (o1 holds it): the same bytes
for ref in f32+ad1 o1; do
	printf 'merge_method: linear\nmodels:\n  - model: %s\n    parameters: {weight: 0.7}\n  - model: f32b\n    parameters: {weight: 0.3}\ndtype: float32\n' "$ref" > "lin-$(echo "$ref" | tr + _).yml"
done
mk-yaml --quiet lin-f32_ad1.yml lin-lora
mk-yaml --quiet lin-o1.yml lin-copy
cmp lin-lora/model.safetensors lin-copy/model.safetensors || fail "a linear merge of f32+ad1 differs from one of its merged copy"
# ... and from a saved plan through the stages, with small chunks
mk-plan -o lin.plan lin-f32_ad1.yml
mk-cat lin.plan | grep -q '"lora"' || fail "the plan's jobs carry no lora"
mk-cat -v lin.plan | grep -q '"adapter":true' || fail "the plan's model table has no adapter"
mk-fetch --chunk-size 1KiB < lin.plan | mk-merge | mk-pack lin-stages
cmp lin-lora/model.safetensors lin-stages/model.safetensors || fail "the staged merge differs"
# the same merge of the bfloat16 base through the pipe
mk-plan p3.yml | mk-fetch --chunk-size 1KiB | mk-merge | mk-pack o3-stages
cmp o3/model.safetensors o3-stages/model.safetensors || fail "the staged bfloat16 merge differs"
# a changed adapter after mk-plan: mk-fetch refuses it
cp -r ad1 ad1-saved
$GEN f32 ad1 --targets q_proj,v_proj --seed 5
expect_fail 1 "run mk-plan again" mk-fetch -o /dev/null < lin.plan
rm -rf ad1 && mv ad1-saved ad1

# the reference tool's flags: --lora-merge-cache not needed, --lora-merge-dtype loads the model as it
mk-yaml --quiet --lora-merge-cache /nonexistent/cache p1.yml o1-cache
cmp o1/model.safetensors o1-cache/model.safetensors || fail "--lora-merge-cache changed the merge"
mk-yaml --quiet --lora-merge-dtype bfloat16 p1.yml o1-bf16
python3 - o1-bf16/model.safetensors <<'PY' || fail "--lora-merge-dtype bfloat16: the output is not bfloat16"
import json, struct, sys
f = open(sys.argv[1], "rb"); h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0])); h.pop("__metadata__", None)
sys.exit(0 if {v["dtype"] for v in h.values()} == {"BF16"} else 1)
PY
expect_fail 2 "--lora-merge-dtype" mk-plan --lora-merge-dtype int8 p1.yml

# refusals and mistakes, each at the reference (line 3, col 12), naming the adapter and what
refuse() {   # refuse 'message' generator-options...
	msg=$1
	shift
	rm -rf bad
	$GEN f32 bad "$@"
	pass f32+bad pb.yml
	expect_fail 1 "$msg" mk-plan -o pb.plan pb.yml
	grep -q "pb.yml:3:12: " err.txt || { cat err.txt; fail "'$msg': not said at the reference"; }
	grep -q "adapter 'bad'" err.txt || { cat err.txt; fail "'$msg': the adapter is not named"; }
	[ ! -s pb.plan ] || fail "a plan was written despite '$msg'"
}
refuse "peft_type IA3 is not supported" --peft-type IA3
# (DoRA and lora_bias are applied: test/cli/lora-peft.sh; these are broken)
refuse "use_dora is true but module 'model.layers.1.mlp.down_proj' has no lora_magnitude_vector" --dora --targets down_proj
refuse "but the base model has no 'model.layers.0.self_attn.q_proj.bias'" --lora-bias
refuse "adapters that train the base's biases are not supported" --bias all
refuse "not of convolutions" --conv
refuse "but its rank is 5 (r)" --bad-rank
refuse "but the base model's 'model.layers.0.self_attn.q_proj.weight' is F32 [64, 64]" --bad-shape
refuse "targets 'model.layers.99.self_attn.q_proj.weight', which the base model does not have" --stray
rm -rf bad && mkdir bad
printf '{"peft_type": "LORA", "r": 4, "lora_alpha": 8}' > bad/adapter_config.json
pass f32+bad pb.yml
expect_fail 1 "no adapter_model.safetensors or adapter_model.bin" mk-plan -o /dev/null pb.yml
pass f32+missing pb.yml
expect_fail 1 "missing" mk-plan -o /dev/null pb.yml

# memory: a 256 MiB embedding the adapter targets (an embedding LoRA), its
# rows streamed through W + s·(B·A)ᵀ chunk by chunk (A and B, 2 MiB each,
# held whole; 3 KiB chunks cut the 4 KiB rows)
if [ "$MK_SAN" != 1 ]; then
	bound=$((64 * 1024))
	mk-gen-model --dtype F32 --hidden 1024 --inter 64 --layers 1 --vocab 65536 --tied big
	$GEN big bigad --targets embed_tokens,q_proj --r 8
	pass big+bigad pbig.yml
	mk-plan pbig.yml | mk-rss fetch.rss mk-fetch --chunk-size 3KiB | mk-merge | mk-pack bigout
	f=$(cat fetch.rss)
	echo "a 256 MiB embedding with a LoRA: mk-fetch peak RSS $f KiB (bound $bound KiB)"
	[ "$f" -lt "$bound" ] || fail "mk-fetch peak RSS $f KiB >= $bound KiB"
	# a sample of its rows, checked here: W + s·(B·A)ᵀ
	python3 - big bigad bigout <<'PY' || fail "the embedding's LoRA rows differ"
import json, struct, sys
def open_st(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; return f, 8 + n, json.loads(f.read(n))
def floats(st, name, at, count):
    f, base, h = st; f.seek(base + h[name]["data_offsets"][0] + at * 4); return struct.unpack("<%df" % count, f.read(count * 4))
W, AD, O = (open_st(p) for p in (sys.argv[1] + "/model.safetensors", sys.argv[2] + "/adapter_model.safetensors", sys.argv[3] + "/model.safetensors"))
name = "model.embed_tokens.weight"
rows, cols = W[2][name]["shape"]
cfg = json.load(open(sys.argv[2] + "/adapter_config.json")); r = cfg["r"]; s = cfg["lora_alpha"] / r
B = [floats(AD, "base_model.model.model.embed_tokens.lora_embedding_B", j * r, r) for j in range(cols)]
for i in (0, 1, 4095, 40000, rows - 1):
    a = [floats(AD, "base_model.model.model.embed_tokens.lora_embedding_A", k * rows + i, 1)[0] for k in range(r)]
    w, o = floats(W, name, i * cols, cols), floats(O, name, i * cols, cols)
    exp = [w[j] + s * sum(B[j][k] * a[k] for k in range(r)) for j in range(cols)]
    d = max(abs(x - y) for x, y in zip(o, exp)) / max(1.0, max(map(abs, exp)))
    assert d < 1e-6, (i, d)
print("the embedding: 5 rows of W + s*(B@A)^T as computed here")
PY
fi
echo "lora: ok"
