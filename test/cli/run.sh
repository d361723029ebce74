# mk_run_merge (mk/run.h), the whole merge in one process, through
# test/tools/mk-run: the same output directory as mk-yaml --processes (the
# four programs), byte for byte,
# for every bundled configuration, a tokenizer merge and a LoRA merge,
# with and without a memory budget; a cancel leaves neither OUT nor
# OUT.mk-partial; a bad configuration gives every diagnostic with its
# place; an existing OUT is refused before any work.
. "$MK_TOP/test/cli/lib.inc"
cd "$MK_TOP"
W=$OLDPWD
# mk-run (a test program) and mk-yaml on the same OpenBLAS kernels: a
# LoRA's B.A rounds as its kernels do (mk_run_merge(3))
OPENBLAS_CORETYPE=$(mk-yaml --version | sed -n 's/^OpenBLAS kernels: //p')
[ -z "$OPENBLAS_CORETYPE" ] || export OPENBLAS_CORETYPE
n=0
for cfg in testdata/configs/*.yml test/conformance/tokenizer-vocab-tokens-f32.yml test/conformance/lora-linear-f32.yml; do
	name=$(basename "$cfg" .yml)
	mkdir -p "$W/run/$name" "$W/yaml/$name"
	mk-run "$cfg" "$W/run/$name/out" 2> "$W/run.err" || { cat "$W/run.err"; fail "$name: mk_run_merge failed"; }
	mk-yaml --processes "$cfg" "$W/yaml/$name/out"
	diff -r "$W/run/$name/out" "$W/yaml/$name/out" || fail "$name: mk_run_merge and mk-yaml differ"
	n=$((n + 1))
done
echo "$n configurations: mk_run_merge wrote what mk-yaml writes"
# an already-parsed configuration: the same bytes
mkdir -p "$W/parsed"
mk-run --parsed testdata/configs/ties.yml "$W/parsed/out"
diff -r "$W/parsed/out" "$W/yaml/ties/out" || fail "a parsed configuration: another output"
# a budget: the stages' shares as mk-yaml splits them
mkdir -p "$W/mem"
mk-run --max-memory 64M testdata/configs/ties.yml "$W/mem/out"
diff -r "$W/mem/out" "$W/yaml/ties/out" || fail "with --max-memory: another output"
cd "$W"
sed "s#testdata/#$MK_TOP/testdata/#" "$MK_TOP/testdata/configs/ties.yml" > ties.yml
# cancelled after the first tensor: no OUT, no partial
expect_fail 1 "cancelled" mk-run --cancel-after 1 ties.yml cancelled
no_out cancelled
grep -q "^tensors [1-9]" err.txt || fail "the cancel came before any tensor"
# an existing OUT: refused before the plan
mkdir exists
expect_fail 1 "exists" mk-run ties.yml exists
# every diagnostic, with its place, and no OUT
printf 'merge_method: nope\nmodels:\n  - model: %s/testdata/models/tiny-a\n    parameters: {wieght: 1}\n' "$MK_TOP" > bad.yml
expect_fail 1 "bad.yml:1:" mk-run bad.yml badout
no_out badout
grep -q "error in the configuration\|errors in the configuration" err.txt || fail "no summary of the errors"
expect_fail 1 "bad.yml:1:" mk-run --validate bad.yml
mk-run --validate ties.yml 2> v.err || { cat v.err; fail "--validate refused a good configuration"; }
