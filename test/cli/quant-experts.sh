# Block FP8 experts stored one by one (as the DeepSeek-V3/R1 and Kimi K2
# FP8 releases store them), read dequantized and assembled into
# transformers v5's fused mlp.experts.gate_up_proj / down_proj: each
# source with its own scales (the JOB's "quant" "scales").  Models from
# mk-gen-arch --unfused 2 --quantized fp8, 3x3 blocks over 8x8 matrices
# (partial blocks, so that counting blocks over the assembled matrix in
# place of each source's would show); checked against Python's standard
# library (test/tools/mk-fp8-experts-check.py): a passthrough bit for bit,
# a float32 linear merge within 1e-6 of the mean of the dequantized models.
. "$MK_TOP/test/cli/lib.inc"
CHECK="python3 $MK_TOP/test/tools/mk-fp8-experts-check.py"
L=model.layers.1.mlp.experts
for arch in deepseek_v3 qwen3_moe; do
	mk-gen-arch --unfused 2 --quantized fp8 --quant-block 3 --seed 1 $arch a-$arch
	mk-gen-arch --unfused 2 --quantized fp8 --quant-block 3 --seed 2 $arch b-$arch
	grep -q '"quant_method": "fp8"' a-$arch/config.json || fail "$arch: no quantization_config"

	printf 'merge_method: passthrough\nmodels:\n  - model: a-%s\n' $arch > p-$arch.yml
	mk-yaml --quiet p-$arch.yml pa-$arch 2> /dev/null
	$CHECK pa-$arch a-$arch > chk.txt || { cat chk.txt; fail "$arch: the passthrough is not the dequantized model"; }
	grep -q ' 0 differ$' chk.txt || fail "$arch: the check compared nothing"
	grep -q "^mk-fp8-experts-check: [1-9][0-9]* tensors bit for bit" chk.txt || fail "$arch: nothing compared"

	printf 'merge_method: linear\ndtype: float32\nmodels:\n  - model: a-%s\n    parameters: {weight: 0.5}\n  - model: b-%s\n    parameters: {weight: 0.5}\n' \
		$arch $arch > l-$arch.yml
	mk-yaml --quiet l-$arch.yml lab-$arch 2> /dev/null
	$CHECK lab-$arch a-$arch b-$arch > chk.txt || { cat chk.txt; fail "$arch: the linear merge is not the mean"; }
	grep -q "within 1e-6, 0 differ$" chk.txt || fail "$arch: the merge check compared nothing"
	cat chk.txt
done

# the plan: one scale tensor per source, in the sources' order
mk-plan l-deepseek_v3.yml > plan.mks 2> /dev/null
S='"scales":["'$L'.0.gate_proj.weight_scale_inv","'$L'.0.up_proj.weight_scale_inv","'$L'.1.gate_proj.weight_scale_inv","'$L'.1.up_proj.weight_scale_inv"]'
grep -aqF "$S" plan.mks || fail "the plan's gate_up_proj has not its four scales"
grep -aqF '"scales":["'$L'.0.down_proj.weight_scale_inv","'$L'.1.down_proj.weight_scale_inv"],"block":[3,3],"dtype":"F32"' plan.mks ||
	fail "the plan's down_proj has not its two scales"
# through the stages, from the saved plan: mk-yaml's output
mk-fetch < plan.mks | mk-merge | mk-pack staged
mk-st-compare --tol 0 staged lab-deepseek_v3 > /dev/null || fail "the staged merge differs from mk-yaml's"
# the scales are each source's: two swapped in the plan, the merge differs
SW='"scales":["'$L'.1.gate_proj.weight_scale_inv","'$L'.0.up_proj.weight_scale_inv","'$L'.0.gate_proj.weight_scale_inv","'$L'.1.up_proj.weight_scale_inv"]'
mk-forge "job-edit=$S/$SW" < plan.mks > swapped.mks
mk-fetch < swapped.mks | mk-merge | mk-pack swapped
if $CHECK swapped a-deepseek_v3 b-deepseek_v3 > chk.txt; then fail "two sources' scales swapped, the merge unchanged"; fi
grep -q "^$L.gate_up_proj: " chk.txt || { cat chk.txt; fail "the swapped scales changed another tensor"; }
# a decoder refuses a count other than the sources'
mk-forge "job-edit=,\"$L.1.up_proj.weight_scale_inv\"]/]" < plan.mks > short.mks
expect_fail 1 '"scales", one per source, 4 here' mk-fetch -i short.mks -o /dev/null

# chunks that end inside a source, mid-row and mid-block (40x40 sources,
# 16x16 blocks, 1500-byte chunks; the 8x8 sources above share a chunk)
mk-gen-arch --unfused 2 --quantized fp8 --quant-block 16 --dim 40 --seed 1 deepseek_v3 d1
mk-gen-arch --unfused 2 --quantized fp8 --quant-block 16 --dim 40 --seed 2 deepseek_v3 d2
printf 'merge_method: linear\ndtype: float32\nmodels:\n  - model: d1\n    parameters: {weight: 0.5}\n  - model: d2\n    parameters: {weight: 0.5}\n' > d.yml
mk-plan d.yml > d.mks 2> /dev/null
mk-fetch --chunk-size 1500 < d.mks > d-in.mks
mk-cat -v d-in.mks | grep -q 'INPT.* elems=\[1500,1600)' || fail "no chunk ends inside an expert's matrix"
mk-merge < d-in.mks | mk-pack dout
$CHECK dout d1 d2 > chk.txt || { cat chk.txt; fail "1500-byte chunks: the merge is not the mean"; }
cat chk.txt

# a source without its scales: refused at plan time, naming it
cp -r a-deepseek_v3 noscale
python3 - noscale/model.safetensors "$L.1.up_proj.weight_scale_inv" <<'PY'
import sys
p, name = sys.argv[1], sys.argv[2].encode()
d = bytearray(open(p, "rb").read())
i = d.index(b'"' + name + b'"')
d[i + len(name)] = ord("X")          # renamed, same length: no scales for it
open(p, "wb").write(bytes(d))
PY
printf 'merge_method: passthrough\nmodels:\n  - model: noscale\n' > ns.yml
expect_fail 1 "tensor '$L.1.up_proj.weight' (F8_E4M3) is not block FP8" mk-plan ns.yml
err_has "dequantize the model to BF16 first" "no word of what to do"
echo "quant-experts: ok"
