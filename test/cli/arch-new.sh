# DeepSeek V3, GLM-4.7-Flash (glm4_moe_lite), gpt-oss and Qwen3-Next:
# two tiny models of each, made by transformers and saved as releases
# store them (testdata/arch-new, scripts/arch-new-conformance gen), merged
# with mk-yaml three ways (linear; slerp over slices with t: [0, 0.5, 1];
# a passthrough frankenmerge that grows the model); each output's tensor
# names, dtypes and shapes equal the tensors transformers' model of the
# output's config holds (testdata/arch-new/golden, from the same script);
# the output config.json records the layer kinds; the merges mk cannot do
# are refused with their reason; mk-moe refuses these bases.
. "$MK_TOP/test/cli/lib.inc"
D="$MK_TOP/testdata/arch-new"

# the tensors of a checkpoint directory: "name DTYPE [shape]" sorted, read
# from the safetensors headers
tensors() {
	for f in "$1"/*.safetensors; do
		n=$(od -An -tu8 -N8 "$f" | tr -d ' ')
		dd if="$f" bs=1 skip=8 count="$n" 2>/dev/null | sed 's/},"/}\n"/g' |
			sed -n 's/^{\{0,1\}"\([^"]*\)":{"dtype":"\([A-Z0-9]*\)","shape":\[\([0-9,]*\)\].*/\1 \2 [\3]/p'
	done | sort
}

merges() {   # FAMILY LAYERS: write lin.yml, slerp.yml, frank.yml
	a="$D/$1-a" b="$D/$1-b" n=$2
	if [ $((n % 2)) -eq 0 ]; then h=$((n / 2)); else h=1; fi
	printf 'merge_method: linear\ndtype: float32\nmodels:\n  - model: %s\n    parameters: {weight: 1.0}\n  - model: %s\n    parameters: {weight: 1.0}\n' "$a" "$b" > linear.yml
	printf 'merge_method: slerp\ndtype: float32\nbase_model: %s\nparameters:\n  t: [0, 0.5, 1]\nslices:\n  - sources:\n      - model: %s\n        layer_range: [0, %s]\n      - model: %s\n        layer_range: [0, %s]\n' "$a" "$a" "$n" "$b" "$n" > slerp.yml
	printf 'merge_method: passthrough\ndtype: float32\nslices:\n  - sources:\n      - model: %s\n        layer_range: [0, %s]\n  - sources:\n      - model: %s\n        layer_range: [%s, %s]\n' "$a" "$n" "$b" "$h" "$n" > frank.yml
}

for fl in deepseek_v3:3 glm4_moe_lite:3 gpt_oss:2 qwen3_next:4; do
	fam=${fl%:*} n=${fl#*:}
	merges "$fam" "$n"
	for c in linear slerp frank; do
		mk-yaml --quiet $c.yml "out-$fam-$c" 2> err.txt || { cat err.txt >&2; fail "$fam: $c merge failed"; }
		tensors "out-$fam-$c" > got.txt
		[ -s got.txt ] || fail "$fam $c: no tensors read from the output"
		diff "$D/golden/$fam-$c.txt" got.txt > diff.txt ||
			{ cat diff.txt >&2; fail "$fam $c: tensors differ from transformers' model (< expected, > mk)"; }
	done
	# one-model passthroughs (experts assembled from their per-expert
	# tensors); the linear merge is their mean
	for m in a b; do
		printf 'merge_method: passthrough\nmodels:\n  - model: %s\n' "$D/$fam-$m" > pt.yml
		mk-yaml --quiet pt.yml "pt-$fam-$m" 2> /dev/null || fail "$fam: passthrough of $m"
	done
	mk-st-compare --lin 1,1/2 --tol 1e-6 "out-$fam-linear" "pt-$fam-a" "pt-$fam-b" > /dev/null ||
		fail "$fam: linear is not the mean"
	echo "$fam: linear, slerp, frankenmerge: $(wc -l < got.txt) tensors as transformers has them"
done

# the slerp gradient: t = 0 at layer 0 gives model a's layer, t = 1 at the
# last layer model b's (MoE experts included, assembled from per-expert
# tensors); the frankenmerge's layers 3 and 4 are b's layers 1 and 2
mk-st-compare --tol 0 --only model.layers.0. out-deepseek_v3-slerp pt-deepseek_v3-a > /dev/null || fail "slerp t=0: layer 0 is not model a's"
mk-st-compare --tol 0 --only model.layers.2. out-deepseek_v3-slerp pt-deepseek_v3-b > /dev/null || fail "slerp t=1: layer 2 is not model b's"
mk-st-compare --tol 1e-6 --only model.layers.1. out-deepseek_v3-slerp pt-deepseek_v3-a > /dev/null && fail "slerp t=0.5: layer 1 is model a's"
mk-st-compare --tol 0 --only model.layers.3. --rename model.layers.3.=model.layers.1. out-deepseek_v3-frank pt-deepseek_v3-b > /dev/null ||
	fail "frankenmerge: layer 3 is not b's layer 1"
mk-st-compare --tol 0 --only model.layers.4. --rename model.layers.4.=model.layers.2. out-qwen3_next-frank pt-qwen3_next-b > /dev/null ||
	fail "qwen3_next frankenmerge: layer 4 is not b's layer 2"

# config.json: the kinds the layers came out with
grep -q '"num_hidden_layers": 6' out-qwen3_next-frank/config.json || fail "qwen3_next frankenmerge layer count"
tr -d ' \n' < out-qwen3_next-frank/config.json | grep -q '"layer_types":\["linear_attention","full_attention","linear_attention","full_attention","linear_attention","full_attention"\]' ||
	fail "qwen3_next frankenmerge: layer_types not rewritten: $(grep -A8 layer_types out-qwen3_next-frank/config.json)"
tr -d ' \n' < out-gpt_oss-frank/config.json | grep -q '"layer_types":\["sliding_attention","full_attention","full_attention"\]' ||
	fail "gpt_oss frankenmerge: layer_types are not the source layers' kinds"
tr -d ' \n' < out-glm4_moe_lite-frank/config.json | grep -q '"mlp_layer_types":\["dense","sparse","sparse","sparse","sparse"\]' ||
	fail "glm4_moe_lite frankenmerge: mlp_layer_types"
grep -q '"first_k_dense_replace": 1,' out-deepseek_v3-frank/config.json || fail "deepseek_v3 first_k_dense_replace"
# the multi-token-prediction layer past num_hidden_layers is not carried
# (transformers drops it on load; src/arch/arch.h says why)
tensors "$D/deepseek_v3-a" | grep -q '^model.layers.3.eh_proj.weight ' || fail "the test model lacks its MTP layer"
tensors pt-deepseek_v3-a | grep -q '^model\.layers\.3\.' && fail "the MTP layer was written"

# Kimi K2: a DeepseekV3ForCausalLM whose config says model_type kimi_k2
mkdir kimi && cp "$D/deepseek_v3-a/model.safetensors" kimi/ &&
	sed 's/"model_type": "deepseek_v3"/"model_type": "kimi_k2"/' "$D/deepseek_v3-a/config.json" > kimi/config.json
grep -q kimi_k2 kimi/config.json || fail "kimi config not written"
mk-arch-check --expect deepseek_v3 kimi > out.txt || { cat out.txt >&2; fail "kimi_k2 does not resolve"; }
grep -q ' fused=[1-9]' out.txt || fail "kimi_k2: experts not assembled: $(cat out.txt)"
printf 'merge_method: passthrough\nmodels:\n  - model: kimi\n' > kimi.yml
mk-yaml --quiet kimi.yml out-kimi 2> /dev/null || fail "kimi_k2 passthrough"
mk-st-compare --tol 0 out-kimi pt-deepseek_v3-a > /dev/null || fail "kimi_k2 passthrough differs from deepseek_v3's"

# refused: layers of different kinds merged into one
printf 'merge_method: slerp\nbase_model: %s\nparameters: {t: 0.5}\nslices:\n  - sources:\n      - model: %s\n        layer_range: [0, 2]\n      - model: %s\n        layer_range: [1, 3]\n' "$D/qwen3_next-a" "$D/qwen3_next-a" "$D/qwen3_next-b" > bad1.yml
expect_fail 1 "is a full_attention layer, but layer 0 of model" mk-yaml bad1.yml o1
err_has "qwen3_next layers of different kinds cannot be merged into one" "qwen3_next kinds message"
sed 's/qwen3_next/gpt_oss/g; s/\[0, 2\]/[0, 1]/; s/\[1, 3\]/[1, 2]/' bad1.yml > bad3.yml
expect_fail 1 "is a full_attention layer, but layer 0 of model" mk-yaml bad3.yml o3
err_has "is a sliding_attention layer" "gpt_oss kinds message"
# refused: a dense layer after a sparse one where the config can only say
# "the first k layers are dense"
printf 'merge_method: passthrough\nslices:\n  - sources:\n      - model: %s\n        layer_range: [0, 3]\n  - sources:\n      - model: %s\n        layer_range: [0, 1]\n' "$D/deepseek_v3-a" "$D/deepseek_v3-b" > bad2.yml
expect_fail 1 "output layer 3 is a dense layer after sparse (MoE) layer 1" mk-yaml bad2.yml o2
err_has "first_k_dense_replace" "the dense-after-sparse message names the key"
[ ! -e o2/config.json ] || fail "a refused merge wrote a config"
# ... but glm4_moe_lite lists each layer's kind, so the same order is fine
sed 's/deepseek_v3/glm4_moe_lite/g' bad2.yml > ok2.yml
mk-yaml --quiet ok2.yml ok2 || fail "glm4_moe_lite dense after sparse"
tr -d ' \n' < ok2/config.json | grep -q '"mlp_layer_types":\["dense","sparse","sparse","dense"\]' || fail "glm4_moe_lite mlp_layer_types after a dense-after-sparse frankenmerge"

# mk-moe builds Mixtral, DeepSeek-MoE and Qwen MoEs from dense models only
for fam in deepseek_v3 gpt_oss qwen3_next glm4_moe_lite; do
	printf 'base_model: %s\ngate_mode: random\nexperts:\n  - source_model: %s\n    positive_prompts: [x]\n  - source_model: %s\n    positive_prompts: [y]\n' "$D/$fam-a" "$D/$fam-a" "$D/$fam-b" > moe.yml
	expect_fail 1 "no output architecture fits these models (base model_type $fam)" mk-moe moe.yml moe-out
done
echo "arch-new: 4 families, 12 merges, refusals checked"
