# mk-pack --quantize fp8 (and mk-yaml's): a merge of block-FP8 models
# written block FP8 again, as transformers' FineGrainedFP8 quantizer
# writes it.  Checked by test/tools/mk-fp8-check.py (Python's standard
# library, apart from mk's C code): every weight the base model stored
# FP8 is the plain merge quantized, bit for bit (F8_E4M3 bytes and the
# float32 NAME.weight_scale_inv), every other tensor the plain merge's
# bytes; config.json gets the input's quantization_config back.
# (scripts/requant-conformance: transformers loads such an output.)
. "$MK_TOP/test/cli/lib.inc"
command -v python3 > /dev/null 2>&1 || exit 77
CHECK="python3 $MK_TOP/test/tools/mk-fp8-check.py"
GEN="--dtype BF16 --hidden 64 --inter 96 --layers 1 --vocab 16 --heads 4 --kv-heads 2"
mk-gen-model $GEN --quant-block 32 --seed 1 --quantized fp8 a > /dev/null
mk-gen-model $GEN --quant-block 32 --seed 2 --quantized fp8 b > /dev/null
# blocks that do not divide the matrices (64 = 48 + 16, 96 = 2 x 48)
mk-gen-model $GEN --quant-block 48 --seed 3 --quantized fp8 c > /dev/null
mk-gen-model $GEN --quant-block 48 --seed 4 --quantized fp8 d > /dev/null
mk-gen-model $GEN --seed 5 plain > /dev/null
mk-gen-model $GEN --seed 6 plain2 > /dev/null

lin() {  # lin FILE A B DTYPE: a linear merge of A and B computed in DTYPE
	printf 'merge_method: linear\nmodels:\n  - model: %s\n    parameters: {weight: 0.3}\n  - model: %s\n    parameters: {weight: 0.7}\ndtype: %s\n' \
		"$2" "$3" "$4" > "$1"
}
lin f32.yml a b float32
lin bf16.yml a b bfloat16
lin c48.yml c d bfloat16

for c in f32:32:a bf16:32:a c48:48:c; do
	n=${c%%:*} blk=${c#*:} src=${c##*:}
	blk=${blk%%:*}
	mk-yaml --quiet $n.yml plain-$n
	mk-yaml --quiet --quantize fp8 $n.yml q-$n
	$CHECK q-$n plain-$n $blk $blk > chk-$n.txt || { cat chk-$n.txt; fail "$n: not the plain merge quantized"; }
	cat chk-$n.txt
	grep -q '^mk-fp8-check: 7 tensors quantized bit for bit, 5 as the plain merge' chk-$n.txt ||
		fail "$n: expected 7 weights quantized and 5 tensors as they were"
	# config.json: the plain merge's, with the input's quantization_config
	python3 - q-$n/config.json plain-$n/config.json $src/config.json <<'PY' || fail "$n: config.json"
import json, sys
q, p, src = (json.load(open(f)) for f in sys.argv[1:4])
assert q.pop("quantization_config") == src["quantization_config"], "quantization_config differs"
assert q == p, "the rest of config.json differs"
PY
	cmp -s q-$n/tokenizer.json plain-$n/tokenizer.json || fail "$n: tokenizer.json differs"
done

# the stages, from a saved plan; the programs as processes: the same bytes
mk-plan f32.yml > plan.mks
grep -q '"requant":"fp8"' plan.mks || fail "the plan marks no weight requant"
grep -q '"quantization_config":{' plan.mks || fail "the plan's HEAD has no quantization_config"
mk-fetch < plan.mks | mk-merge | mk-pack --quantize fp8 staged
cmp staged/model.safetensors q-f32/model.safetensors || fail "mk-pack --quantize differs from mk-yaml --quantize"
cmp staged/config.json q-f32/config.json || fail "staged config.json differs"
mk-yaml --quiet --processes --quantize fp8 f32.yml procs
cmp procs/model.safetensors q-f32/model.safetensors || fail "mk-yaml --processes --quantize differs"
mk-yaml --print-pipeline --quantize fp8 f32.yml x | grep -q 'mk-pack --quantize fp8' ||
	fail "--print-pipeline lacks mk-pack --quantize fp8"
# without --quantize the HEAD's marks change nothing
mk-fetch < plan.mks | mk-merge | mk-pack unq
cmp unq/model.safetensors plain-f32/model.safetensors || fail "mk-pack without --quantize differs from the plain merge"

# the checker sees a fault: one F8 byte changed
cp -r q-f32 broken
python3 - broken/model.safetensors <<'PY'
import json, struct, sys
f = open(sys.argv[1], "r+b")
n = struct.unpack("<Q", f.read(8))[0]
h = json.loads(f.read(n))
off = 8 + n + h["model.layers.0.mlp.down_proj.weight"]["data_offsets"][0] + 5
f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 1]))
PY
if $CHECK broken plain-f32 32 32 > /dev/null; then fail "mk-fp8-check missed a changed byte"; fi

# mk reads its own output back: dequantized, within FP8's rounding of
# the plain merge (E4M3 keeps 3 mantissa bits: half a step is 1/16 of
# a value; the values here are below 0.04)
printf 'merge_method: passthrough\nmodels:\n  - model: q-bf16\n' > back.yml
mk-yaml --quiet back.yml back
mk-st-compare --tol 0.0025 back plain-bf16 > cmp.txt || { cat cmp.txt; fail "re-read output not near the plain merge"; }
if mk-st-compare --tol 0 back plain-bf16 > /dev/null; then fail "re-read output equals the plain merge exactly"; fi

# refused: a merge of models that were not block FP8, another format,
# --resume
lin p.yml plain plain2 float32
expect_fail 1 "marks no weight as quantized" mk-yaml --quiet --quantize fp8 p.yml pq
no_out pq
expect_fail 2 "expected fp8 or mxfp4" mk-pack --quantize int8 x
expect_fail 1 "write them so with --quantize fp8" mk-yaml --quiet --quantize mxfp4 f32.yml x
no_out x
expect_fail 1 "cannot be combined" mk-yaml --quiet --quantize fp8 --resume f32.yml rs

# memory: a weight's block-rows, one at a time.  Matrices of 8192 x 1024
# and 1024 x 8192 (32 MiB each as float32), merged with one merge thread
# (a tensor at a time): mk-pack holds one block-row of the widest,
# 128 x 8192 float32 + its F8 bytes + 64 scales = 5243136 bytes, and its
# peak RSS stays under --max-memory's bound
M="--dtype BF16 --hidden 1024 --inter 8192 --layers 1 --vocab 16 --heads 8 --kv-heads 8 --quantized fp8"
mk-gen-model $M --seed 1 m1 > /dev/null
mk-gen-model $M --seed 2 m2 > /dev/null
lin m.yml m1 m2 bfloat16
mk-plan --max-memory 16M m.yml > m.mks
mk-fetch --max-memory 16M -i m.mks | mk-merge -j 1 --max-memory 16M |
	mk-rss k.rss mk-pack -v --max-memory 16M --quantize fp8 mout 2> pack.txt
grep -q 'at most 5.2 MB of block-rows held' pack.txt || { cat pack.txt; fail "mk-pack held other than one block-row"; }
rss_under k.rss 40960 "mk-pack --quantize fp8, 32 MiB matrices in 16M"
echo "requant: ok"
