# mk-multi: a recipe of three merges, each reading the one before, gives
# the bytes of the three merges run one by one with mk-yaml; --lazy skips
# what is finished, --no-lazy does it all again; the order follows the
# references whatever the documents' order; refusals (a cycle, a name
# twice, a merge without a name and no --out-path) before any merge, and
# a failing merge stops the ones after it.  mergekit-multi's values:
# test/cli/conformance-multi.sh.
. "$MK_TOP/test/cli/lib.inc"
gen() { mk-gen-model --dtype F32 --layers 2 --hidden 16 --vocab 32 --seed "$2" "$1" > /dev/null; }
gen a 1
gen b 2
gen c 3
# the final merge first in the file: the order is the references'
cat > r.yml <<'Y'
merge_method: task_arithmetic
base_model: a
models:
  - model: s2
    parameters: {weight: 0.7}
  - model: s1
    parameters: {weight: 0.3}
---
name: s2
merge_method: slerp
base_model: s1
models:
  - model: s1
  - model: c
parameters:
  t: [0.3, 0.6]
---
name: s1
merge_method: linear
models:
  - model: a
    parameters: {weight: 0.4}
  - model: b
    parameters: {weight: 0.6}
Y
mk-multi --print-order r.yml -I inter --out-path final > order.txt
printf 's1\tinter/s1\ns2\tinter/s2\n-\tfinal\n' | cmp - order.txt || { cat order.txt; fail "not the order of the references"; }
[ ! -e inter ] || fail "--print-order made the intermediate directory"
mk-multi r.yml -I inter --out-path final 2> err.txt
[ ! -s err.txt ] || { cat err.txt; fail "stderr not empty (no terminal: no progress)"; }
# the same three merges by hand
printf 'merge_method: linear\nmodels:\n  - model: a\n    parameters: {weight: 0.4}\n  - model: b\n    parameters: {weight: 0.6}\n' > h1.yml
printf 'merge_method: slerp\nbase_model: h/s1\nmodels:\n  - model: h/s1\n  - model: c\nparameters:\n  t: [0.3, 0.6]\n' > h2.yml
printf 'merge_method: task_arithmetic\nbase_model: a\nmodels:\n  - model: h/s2\n    parameters: {weight: 0.7}\n  - model: h/s1\n    parameters: {weight: 0.3}\n' > h3.yml
mkdir h
mk-yaml h1.yml h/s1
mk-yaml h2.yml h/s2
mk-yaml h3.yml h/final
for s in s1 s2; do
	cmp inter/$s/model.safetensors h/$s/model.safetensors || fail "$s differs from its merge by hand"
	cmp inter/$s/config.json h/$s/config.json || fail "$s: config.json differs"
done
cmp final/model.safetensors h/final/model.safetensors || fail "the final merge differs from its merge by hand"
# what s2 planned: its document, name out, references to s1 rewritten
grep -q '^name:' inter/s2/mergekit_config.yml && fail "the name is in s2's configuration"
grep -q '^base_model: "inter/s1"$' inter/s2/mergekit_config.yml || { cat inter/s2/mergekit_config.yml; fail "s2 does not read inter/s1"; }
grep -q '  - model: c$' inter/s2/mergekit_config.yml || fail "a model not named as a merge was rewritten"
# --lazy (the default): finished merges are skipped, their files untouched
ls -li inter/s1/model.safetensors final/model.safetensors > before.txt
mk-multi r.yml -I inter --out-path final 2> err.txt
grep -q "skipped, already there: 's1'" err.txt || { cat err.txt; fail "s1 not skipped"; }
ls -li inter/s1/model.safetensors final/model.safetensors | cmp - before.txt || fail "--lazy rewrote a finished merge"
# a merge whose output is gone is made again, the others not
rm -rf final
mk-multi --quiet r.yml -I inter --out-path final 2> err.txt
grep -q "skipped, already there: 's2'" err.txt || fail "s2 not skipped"
cmp final/model.safetensors h/final/model.safetensors || fail "the final merge, made again, differs"
# --no-lazy: every merge again, over its output, the same bytes
s1_inode=$(stat -c %i inter/s1/model.safetensors)
mk-multi --no-lazy r.yml -I inter --out-path final 2> err.txt
grep -q skipped err.txt && fail "--no-lazy skipped a merge"
[ "$(stat -c %i inter/s1/model.safetensors)" != "$s1_inode" ] || fail "--no-lazy did not make s1 again"
cmp final/model.safetensors h/final/model.safetensors || fail "--no-lazy: the final merge differs"
# stdin; mergekit's options noted
mk-multi --lazy-unpickle - -I inter --out-path final < r.yml 2> err.txt
grep -q "means nothing to mk" err.txt || fail "mergekit's options are not noted"
# refusals before any merge
printf 'name: x\nmerge_method: linear\nmodels:\n  - model: y\n    parameters: {weight: 1}\n---\nname: y\nmerge_method: linear\nmodels:\n  - model: x\n    parameters: {weight: 1}\n' > cyc.yml
expect_fail 1 "merge 'x' depends on itself: 'x' -> 'y' -> 'x'" mk-multi cyc.yml -I ci
[ ! -e ci ] || fail "a refused recipe made its directory"
printf 'name: x\nmerge_method: linear\nmodels:\n  - model: a\n    parameters: {weight: 1}\n---\nname: x\nmerge_method: linear\nmodels:\n  - model: b\n    parameters: {weight: 1}\n' > dup.yml
expect_fail 1 "dup.yml:7:1: name: merge name 'x' is used twice (first at line 1)" mk-multi dup.yml -I di
expect_fail 2 "--out-path is required" mk-multi r.yml -I oi
expect_fail 2 "--intermediate-dir (-I) is required" mk-multi r.yml --out-path o
expect_fail 2 "expected CONFIG" mk-multi -I x
# a merge that fails stops those after it; what was made before stays
sed 's/  - model: c$/  - model: nope/' r.yml > bad.yml
expect_fail 1 "bad.yml[s2]:5:12: models[1].model: model 'nope'" mk-multi bad.yml -I bi --out-path bo
grep -q "nope" err.txt || fail "the failure does not name the model"
[ -f bi/s1/model.safetensors ] || fail "s1 was not kept"
no_out bi/s2
no_out bo
mk-multi --help | grep -q -- "--intermediate-dir" || fail "--help"
mk-multi --version | grep -q mk || fail "--version"
