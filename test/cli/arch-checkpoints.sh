# Every embedded architecture definition: a generated checkpoint is
# recognised from its config.json, and every planned weight resolves in it
# (by name; by tied name when optional weights are left out; through the
# fused-expert conversion when experts are stored one by one).
. "$MK_TOP/test/cli/lib.inc"
names=$(mk-gen-arch --list)
n=0
for a in $names; do
	mk-gen-arch --seed 3 "$a" "m-$a" || fail "mk-gen-arch $a"
	mk-arch-check --expect "$a" "m-$a" > out.txt || { cat out.txt >&2; fail "$a: planned weights do not resolve"; }
	grep -q "^file=$a " out.txt || fail "$a: $(cat out.txt)"
	grep -q ' absent-optional=0$' out.txt || fail "$a: an optional weight written by the generator was not found"
	mk-gen-arch --layers 3 --required-only "$a" "r-$a" || fail "mk-gen-arch --required-only $a"
	mk-arch-check --expect "$a" "r-$a" > out.txt || { cat out.txt >&2; fail "$a (required only) does not resolve"; }
	n=$((n + 1))
done
[ "$n" -ge 62 ] || fail "only $n definitions listed"
# tied lm_head: with optional weights left out it resolves to the embedding
mk-arch-check r-llama | grep -q ' tied=1 ' || fail "llama lm_head did not fall back to embed_tokens"
# phi2 and phi2-old share a class; model_type picks the file
grep -q '"model_type": "phi-msft"' m-phi2-old/config.json || fail "phi2-old config lacks its model_type"
# fused experts from per-expert checkpoints
for a in mixtral qwen3_moe glm4moe qwen3_vl; do
	mk-gen-arch --unfused 3 "$a" "u-$a"
	mk-arch-check --expect "$a" "u-$a" > out.txt || { cat out.txt >&2; fail "$a: fused experts do not resolve"; }
	grep -q ' fused=[1-9]' out.txt || fail "$a: no fused conversion used: $(cat out.txt)"
done
# the same tensor names twice infer one module with the layer count
mk-gen-arch --seed 9 --required-only llama t-llama
mk-arch-check --infer m-llama t-llama > inf.txt
grep -q '^module default layers=2$' inf.txt || { cat inf.txt >&2; fail "inferred llama modules"; }
grep -q 'layer model.layers.${layer_index}.self_attn.q_proj.weight$' inf.txt || fail "inferred llama template"
# an unknown class is reported
mkdir x && cp m-llama/model.safetensors x/ && echo '{"architectures": ["NoSuchForCausalLM"]}' > x/config.json
expect_fail 1 'no architecture definition for NoSuchForCausalLM' mk-arch-check x
grep -q 'pre lm_head.weight optional embed tied=model.embed_tokens.weight$' inf.txt || fail "inferred lm_head tie"
# every definition plans and merges with passthrough and linear
ok=0
for a in $names; do
	mk-gen-arch --seed 4 "$a" "n-$a"
	printf 'merge_method: linear\nmodels:\n  - model: m-%s\n    parameters: {weight: 1.0}\n  - model: n-%s\n    parameters: {weight: 1.0}\n' "$a" "$a" > lin-$a.yml
	printf 'merge_method: passthrough\nmodels:\n  - model: m-%s\n' "$a" > pt-$a.yml
	for k in lin pt; do
		if ! mk-yaml --quiet $k-$a.yml out-$k-$a 2> err-$k-$a.txt; then
			cat err-$k-$a.txt >&2
			fail "$a: $k merge failed"
		fi
	done
	# passthrough of one model gives its tensors back
	mk-st-compare --tol 0 out-pt-$a m-$a > /dev/null || fail "$a: passthrough changed tensors"
	mk-st-compare --lin 1,1/2 --tol 1e-6 out-lin-$a m-$a n-$a > /dev/null || fail "$a: linear is not the mean"
	ok=$((ok + 1))
done
echo "$ok architectures merged with passthrough and linear"
# checkpoints that store experts one by one merge into the fused layout
# (the input assembled from the per-expert tensors, in the job), also when
# chunks are smaller than one expert
if python3 -c 'import safetensors' 2>/dev/null; then
	for a in mixtral qwen3_moe; do
		printf 'merge_method: passthrough\nmodels:\n  - model: u-%s\n' "$a" > fz-$a.yml
		mk-plan fz-$a.yml | mk-fetch --chunk-size 1KiB | mk-merge | mk-pack fz-$a
		python3 - u-$a fz-$a <<'PY'
import glob, re, sys
from safetensors import deserialize
def load(d):
    t = {}
    for f in glob.glob(d + "/*.safetensors"):
        t.update({n: bytes(v["data"]) for n, v in deserialize(open(f, "rb").read())})
    return t
src, out = load(sys.argv[1]), load(sys.argv[2])
fused = [n for n in out if n.endswith("experts.gate_up_proj")]
assert fused, "no fused tensor written"
for n in fused:
    layer = re.search(r"layers\.(\d+)\.", n).group(1)
    parts = sorted((k for k in src if f"layers.{layer}." in k and ".experts." in k and re.search(r"(w1|w3|gate_proj|up_proj)\.weight$", k)),
                   key=lambda k: (int(re.search(r"experts\.(\d+)\.", k).group(1)), 0 if re.search(r"(w1|gate_proj)\.weight$", k) else 1))
    assert out[n] == b"".join(src[k] for k in parts), n
PY
	done
fi
