# MXFP4 checkpoints (gpt-oss's experts): mk reads mlp.experts.gate_up_proj
# and down_proj, stored as *_blocks (U8, two FP4 codes a byte) and
# *_scales (U8, E8M0), dequantized (mk-fetch, the JOB's "quant" kind
# "mxfp4") in transformers' layout [E, C, R].  testdata/mxfp4/: three tiny
# gpt-oss models and the goldens of transformers' dequantization and of
# mergekit's merges of the dequantized copies (scripts/quant-golden.py
# --mxfp4).
. "$MK_TOP/test/cli/lib.inc"
G="$MK_TOP/testdata/mxfp4"
for m in a b c; do cp -r "$G/mxfp4-$m" $m; done

# dequantization: bit for bit transformers' (BF16, the config's dtype;
# the same tensors: no codes or scales left), config.json without the
# quantization_config
printf 'merge_method: passthrough\nmodels:\n  - model: a\n' > p.yml
mk-yaml --quiet p.yml pa 2> /dev/null
mk-st-diff pa "$G/dequant-a" > diff.txt || { cat diff.txt; fail "dequantized a differs from transformers' (names, dtypes, shapes or bytes)"; }
grep -q quantization_config pa/config.json && fail "the output config.json keeps the quantization_config"
grep -q '"dtype": "bfloat16"' pa/config.json || fail "the output config.json lost its dtype"

# merges of MXFP4 models, against mergekit's of the dequantized copies
# (float32: max|diff| <= 1e-6 of the largest magnitude; BF16: 1 ulp)
printf 'merge_method: passthrough\nmodels:\n  - model: b\n' > pb.yml
mk-yaml --quiet pb.yml pb 2> /dev/null
for c in linear-f32 ties-f32 slerp-bf16; do
	sed -e 's/MODEL_A/a/; s/MODEL_B/b/; s/MODEL_C/c/' "$MK_TOP/testdata/quant/$c.yml" > $c.yml
	mk-yaml --quiet $c.yml out-$c 2> /dev/null
	case $c in
	*-f32) args="--tol 1e-6" ;;
	*) args="--bf16-ulps 1 --inputs pa,pb" ;;
	esac
	mk-st-compare $args out-$c "$G/merge-$c" > cmp-$c.txt || { cat cmp-$c.txt; fail "$c: differs from mergekit's"; }
	grep -q 'experts.gate_up_proj ' cmp-$c.txt || fail "$c: gate_up_proj not compared"
done

# the same through the stages, from a saved plan
mk-plan linear-f32.yml > plan.mks 2> /dev/null
grep -a -q '"tensor":"model.layers.0.mlp.experts.down_proj_blocks","dtype":"F4","shape":\[4,32,64\],"load_dtype":"F32","quant":{"kind":"mxfp4","scale":"model.layers.0.mlp.experts.down_proj_scales","dtype":"BF16"}' plan.mks ||
	fail "the plan has no mxfp4 input for down_proj"
mk-fetch < plan.mks | mk-merge | mk-pack staged
mk-st-compare --tol 0 staged out-linear-f32 > /dev/null || fail "the staged merge differs from mk-yaml's"

# a JOB whose mxfp4 input is not F4 is refused by name
mk-forge 'job-edit="dtype":"F4"/"dtype":"U8"' < plan.mks > edited.mks
expect_fail 1 'bad "quant" (kind "mxfp4"' mk-fetch -i edited.mks
# the chunks are in the dequantized order whatever their size: 1 KiB
# (2048 codes: half an expert of gate_up_proj, a quarter of down_proj)
mk-fetch --chunk-size 1KiB -i plan.mks | mk-merge | mk-pack small
mk-st-compare --tol 0 small out-linear-f32 > /dev/null || fail "the merge in 1 KiB chunks differs"

# codes without their scales are refused at plan time, with what to do
cp -r a bad
sed -i 's/gate_up_proj_scales/gate_up_proj_scalex/' bad/model.safetensors
printf 'merge_method: linear\nmodels:\n  - model: a\n    parameters: {weight: 0.5}\n  - model: bad\n    parameters: {weight: 0.5}\n' > bad.yml
expect_fail 1 "is not MXFP4 as its config.json says" mk-plan bad.yml
err_has "model.layers.0.mlp.experts.gate_up_proj_blocks" "the tensor not named"
err_has "dequantize the model to BF16 first" "no word of what to do"

# mk-gen-model's MXFP4 gpt-oss models (random codes, exponents 118 to
# 129): the merge through the stages equals mk-yaml's, and memory stays
# bounded: two models whose gate_up_proj is 8M elements (16 MB
# dequantized, 4 MB of codes an expert) merged under --max-memory 16M
# (mk-fetch 24M: it keeps one expert's codes and scales per input,
# 2.75 MB each, out of the quarter of its budget for held data, and
# refuses a budget whose quarter they do not fit), each stage's peak RSS
# bounded
M="--arch gpt_oss --quantized mxfp4 --dtype BF16 --hidden 1024 --inter 2048 --experts 2 --layers 1 --vocab 16 --heads 8 --kv-heads 8"
mk-gen-model $M --seed 1 m1
mk-gen-model $M --seed 2 m2
printf 'merge_method: linear\nmodels:\n  - model: m1\n    parameters: {weight: 0.5}\n  - model: m2\n    parameters: {weight: 0.5}\n' > m.yml
mk-plan --max-memory 16M m.yml > m.mks 2> /dev/null
mk-rss f.rss mk-fetch -v --max-memory 24M -i m.mks 2> fetch.txt | mk-rss g.rss mk-merge --max-memory 16M |
	mk-rss k.rss mk-pack --max-memory 16M mout
grep -q 'dequantizing: 5505024 bytes of MXFP4 experts held' fetch.txt || { cat fetch.txt; fail "mk-fetch held other than an expert per input"; }
rss_under f.rss 40960 "mk-fetch, MXFP4 merge in 24M"
rss_under g.rss 40960 "mk-merge, MXFP4 merge in 16M"
rss_under k.rss 40960 "mk-pack, MXFP4 merge in 16M"
expect_fail 1 "keeps 5505024 bytes of experts' codes and scales, more than mk-fetch's share" \
	mk-fetch --max-memory 16M -i m.mks -o /dev/null
mk-yaml --quiet m.yml myaml 2> /dev/null
mk-st-diff mout myaml > diff.txt || { cat diff.txt; fail "the staged MXFP4 merge differs from mk-yaml's"; }
echo "mxfp4: ok"
