# Quantized checkpoints (block FP8, as DeepSeek-V3 ships): mk reads each
# FP8 weight dequantized (mk-fetch, the JOB's "quant").  Models from
# mk-gen-model --quantized fp8 (every layer matrix FP8, 32x32 blocks here);
# the goldens in testdata/quant/ are transformers' dequantization and
# mergekit's merges of the dequantized copies (scripts/quant-golden.py).
. "$MK_TOP/test/cli/lib.inc"
G="$MK_TOP/testdata/quant"
GEN="--dtype BF16 --hidden 64 --inter 96 --layers 1 --vocab 16 --heads 4 --kv-heads 2 --quant-block 32"
mk-gen-model $GEN --seed 1 --quantized fp8 a
mk-gen-model $GEN --seed 2 --quantized fp8 b
mk-gen-model $GEN --seed 3 --quantized fp8 c
mk-gen-model $GEN --seed 1 plain

# dequantization: bit for bit transformers' (BF16), config.json without
# the quantization_config, the stored bytes not merged as numbers
printf 'merge_method: passthrough\nmodels:\n  - model: a\n' > p.yml
mk-yaml --quiet p.yml pa
mk-st-compare --tol 0 pa "$G/dequant-a" > cmp.txt || { cat cmp.txt; fail "dequantized a differs from transformers'"; }
grep -q quantization_config pa/config.json && fail "the output config.json keeps the quantization_config"
grep -q '"torch_dtype": "bfloat16"' pa/config.json || fail "the output config.json lost its dtype"
# (the header of the output's safetensors: no FP8 dtype, no scales)
python3 -c 'import json, struct, sys; f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; print(f.read(n).decode())' \
	pa/model.safetensors > hdr.txt
grep -q model.layers.0.mlp.down_proj.weight hdr.txt || fail "the output's header lists no down_proj"
grep -q F8_E4M3 hdr.txt && fail "the output holds FP8 tensors"
grep -q scale_inv hdr.txt && fail "the output holds the scales"
# (and it is close to the model before quantization: within FP8's rounding)
mk-st-compare --tol 0.07 pa plain > cmp.txt || { cat cmp.txt; fail "dequantized a is not near the unquantized values"; }
if mk-st-compare --tol 0 pa plain > /dev/null; then fail "dequantized a equals the unquantized model exactly"; fi

# merges of two FP8 models, against mergekit's of the dequantized copies
for c in linear-f32 ties-f32 slerp-bf16; do
	sed -e 's/MODEL_A/a/; s/MODEL_B/b/; s/MODEL_C/c/' "$G/$c.yml" > $c.yml
	mk-yaml --quiet $c.yml out-$c
	case $c in
	*-f32) args="--tol 1e-6" ;;
	*) args="--bf16-ulps 1 --inputs pa,pb" ;;
	esac
	[ $c = slerp-bf16 ] && { printf 'merge_method: passthrough\nmodels:\n  - model: b\n' > pb.yml; mk-yaml --quiet pb.yml pb; }
	mk-st-compare $args out-$c "$G/merge-$c" > cmp-$c.txt || { cat cmp-$c.txt; fail "$c: differs from mergekit's"; }
done

# the same through the stages, from a saved plan (mk-plan | mk-fetch | mk-merge | mk-pack)
mk-plan linear-f32.yml > plan.mks
grep -q '"quant":{"kind":"fp8","scale":"model.layers.0.mlp.down_proj.weight_scale_inv","block":\[32,32\],"dtype":"BF16"}' plan.mks ||
	fail "the plan has no quant key for down_proj"
mk-fetch < plan.mks | mk-merge | mk-pack staged
mk-st-compare --tol 0 staged out-linear-f32 > /dev/null || fail "the staged merge differs from mk-yaml's"

# a weight whose scales do not fit its blocks is refused at plan time
mk-gen-model $GEN --seed 4 --quantized fp8 bad
sed -i 's/"weight_block_size": \[32, 32\]/"weight_block_size": [16, 32]/' bad/config.json
printf 'merge_method: linear\nmodels:\n  - model: a\n    parameters: {weight: 0.5}\n  - model: bad\n    parameters: {weight: 0.5}\n' > bad.yml
expect_fail 1 "is not block FP8 as its config.json says" mk-plan bad.yml
err_has "dequantize the model to BF16 first" "no word of what to do"
# memory: two FP8 models whose MLP matrices are 8M elements (16 MB each
# dequantized) merged under --max-memory 16M, each stage's peak RSS
# bounded (scripts/bench-quant-memory.sh: the DeepSeek-V3-sized run)
M="--dtype BF16 --hidden 1024 --inter 8192 --layers 1 --vocab 16 --heads 8 --kv-heads 8 --quantized fp8"
mk-gen-model $M --seed 1 m1
mk-gen-model $M --seed 2 m2
printf 'merge_method: linear\nmodels:\n  - model: m1\n    parameters: {weight: 0.5}\n  - model: m2\n    parameters: {weight: 0.5}\n' > m.yml
mk-plan --max-memory 16M m.yml > m.mks
mk-rss f.rss mk-fetch --max-memory 16M -i m.mks | mk-rss g.rss mk-merge --max-memory 16M | mk-rss k.rss mk-pack --max-memory 16M mout
for s in f:mk-fetch g:mk-merge k:mk-pack; do
	rss_under ${s%%:*}.rss 40961 "${s#*:}, FP8 merge in 16M"
done
echo "quant: ok"
