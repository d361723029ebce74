# Block-FP8 DeepSeek-V3 checkpoints as its releases store them (experts
# one by one, MLA attention, a dense first layer, a shared expert), made
# by transformers and quantized by its own quantizer (testdata/quant-ds,
# scripts/quant-golden.py --deepseek): mk reads them dequantized bit for
# bit as transformers does (its experts fused), and its merges equal
# mergekit's merges of the dequantized copies (float32 within 1e-6 of the
# largest magnitude, BF16 within one bf16 ulp), the routed experts, which
# mergekit 0.1.5 leaves out of its output, equal to torch's linear merge.
. "$MK_TOP/test/cli/lib.inc"
G="$MK_TOP/testdata/quant-ds"
for m in a b c; do cp -r "$G/ds-$m" $m; done

printf 'merge_method: passthrough\nmodels:\n  - model: a\n' > p.yml
mk-yaml --quiet p.yml pa 2> /dev/null
mk-st-compare --tol 0 pa "$G/dequant-a" > cmp.txt || { cat cmp.txt; fail "dequantized a differs from transformers'"; }
grep -q 'model.layers.1.mlp.experts.gate_up_proj .* ok$' cmp.txt || fail "the fused experts not compared"
test "$(grep -c ' ok$' cmp.txt)" = "$(python3 -c 'import json,struct,sys; f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]; print(len([k for k in json.loads(f.read(n)) if k != "__metadata__"]))' "$G/dequant-a/model.safetensors")" ||
	fail "mk's dequantized a has not transformers' tensors"
grep -q quantization_config pa/config.json && fail "the output config.json keeps the quantization_config"
printf 'merge_method: passthrough\nmodels:\n  - model: b\n' > pb.yml
mk-yaml --quiet pb.yml pb 2> /dev/null

for c in linear-f32 ties-f32 slerp-bf16; do
	sed -e 's/MODEL_A/a/; s/MODEL_B/b/; s/MODEL_C/c/' "$MK_TOP/testdata/quant/$c.yml" > $c.yml
	mk-yaml --quiet $c.yml out-$c 2> /dev/null
	case $c in
	*-f32) args="--tol 1e-6" ;;
	*) args="--bf16-ulps 1 --inputs pa,pb" ;;
	esac
	# every tensor mergekit wrote, found in mk's output
	mk-st-compare $args "$G/merge-$c" out-$c > cmp-$c.txt || { cat cmp-$c.txt; fail "$c: differs from mergekit's"; }
	grep -q 'self_attn.kv_a_proj_with_mqa.weight ' cmp-$c.txt || fail "$c: MLA attention not compared"
	grep -q 'mlp.shared_experts.down_proj.weight ' cmp-$c.txt || fail "$c: the shared expert not compared"
done
mk-st-compare --tol 1e-6 --only mlp.experts. out-linear-f32 "$G/experts-linear-f32" > cmp-e.txt ||
	{ cat cmp-e.txt; fail "the routed experts' linear merge differs from torch's"; }
test "$(grep -c ' ok$' cmp-e.txt)" = 2 || fail "the routed experts not compared"
echo "quant-deepseek: ok"
