# mk-pytorch: state dicts (.safetensors files, torch.save pickles) merged
# without an architecture.  The values against mergekit-pytorch's are
# test/cli/conformance-pytorch.sh's; here: the inputs' formats give the
# same bytes, the output is the tensors alone in name order, a 0 weight
# is a weight, the missing-tensor rules (-i, -u, neither), refusals, the
# CLI's conventions.
. "$MK_TOP/test/cli/lib.inc"
gen() { mk-gen-model --dtype F32 --layers "$2" --hidden 16 --vocab 32 --seed "$3" "$1" > /dev/null; cp "$1/model.safetensors" "$1.safetensors"; }
gen a 2 1
gen b 2 2
gen s 1 3
# tensor bytes of FILE's NAME, hex (python3's standard library only)
tbytes() {
	python3 - "$1" "$2" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
b, e = h[sys.argv[2]]["data_offsets"]; print(raw[8 + n + b:8 + n + e].hex())
PY
}
names() {
	python3 - "$1" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
h.pop("__metadata__", None)
for k in sorted(h, key=lambda k: h[k]["data_offsets"][0]): print(k)
PY
}
cat > lin.yml <<'Y'
merge_method: linear
models:
  - model: a.safetensors
    parameters:
      weight:
        - filter: mlp
          value: 0
        - value: 0.5
  - model: b.safetensors
parameters:
  weight: 1.0
Y
mk-pytorch lin.yml out 2> err.txt
[ ! -s err.txt ] || { cat err.txt; fail "stderr not empty (no terminal: no progress)"; }
ls out > files.txt
[ "$(cat files.txt)" = model.safetensors ] || { cat files.txt; fail "OUT holds more than the tensors"; }
# every tensor of the inputs, in byte order of the names
names a.safetensors | LC_ALL=C sort > want.txt
names out/model.safetensors > got.txt
cmp want.txt got.txt || fail "the output's tensors are not the inputs' names in order"
# a weight of 0 is a weight: the mlp tensors are b's, exactly ((0 a + 1 b) / 1)
[ "$(tbytes out/model.safetensors model.layers.1.mlp.up_proj.weight)" = "$(tbytes b.safetensors model.layers.1.mlp.up_proj.weight)" ] ||
	fail "a filtered weight of 0 was not used"
[ "$(tbytes out/model.safetensors model.norm.weight)" != "$(tbytes b.safetensors model.norm.weight)" ] ||
	fail "the 0.5 weight was not used"
# torch.save pickles as inputs (any name but .safetensors): the same bytes
python3 "$MK_TOP/test/tools/mk-gen-torchbin.py" b b-bin --file weights.pt
sed 's|b.safetensors|b-bin/weights.pt|' lin.yml > lin-pt.yml
mk-pytorch lin-pt.yml out-pt
cmp out/model.safetensors out-pt/model.safetensors || fail "the merge over a torch pickle differs"
# the stages as programs (mk-plan --state-dicts): the same bytes
mk-plan --state-dicts lin-pt.yml | mk-fetch | mk-merge | mk-pack out-pipe
cmp out/model.safetensors out-pipe/model.safetensors || fail "the pipeline differs from mk-pytorch"
expect_fail 2 "go with --state-dicts" mk-plan --tensor-union lin.yml
# the config from stdin; the same again (deterministic)
mk-pytorch - out-stdin < lin.yml
cmp out/model.safetensors out-stdin/model.safetensors || fail "not deterministic (or stdin differs)"
# shards as mk-pack writes them
mk-pytorch --out-shard-size 20K lin.yml out-sh
[ -f out-sh/model.safetensors.index.json ] || fail "no shards at 20K"
mk-st-diff out out-sh
# a tensor some model lacks: an error naming it, no OUT
cat > miss.yml <<'Y'
merge_method: linear
models:
  - model: a.safetensors
  - model: s.safetensors
parameters: {weight: 1.0}
Y
expect_fail 1 "lacks 9 of the 21 tensors (the first 'model.layers.1.input_layernorm.weight')" mk-pytorch miss.yml o1
no_out o1
grep -qF -- "--tensor-intersection" err.txt || fail "the error does not say what to do"
# -i: left out; -u: merged from the models that have it (a alone: a's bytes)
mk-pytorch -i miss.yml oi 2> err.txt
grep -qF "they are left out" err.txt || fail "-i: no warning"
names oi/model.safetensors | grep -q 'layers\.1\.' && fail "-i kept a tensor a model lacks"
[ "$(names oi/model.safetensors | wc -l)" = 12 ] || fail "-i: not the 12 common tensors"
mk-pytorch --tensor-union miss.yml ou 2> /dev/null
mk-plan --state-dicts --tensor-union miss.yml 2> /dev/null | mk-fetch | mk-merge | mk-pack ou-pipe
cmp ou/model.safetensors ou-pipe/model.safetensors || fail "-u: the pipeline differs from mk-pytorch"
[ "$(names ou/model.safetensors | wc -l)" = 21 ] || fail "-u: not every tensor"
[ "$(tbytes ou/model.safetensors model.layers.1.self_attn.q_proj.weight)" = "$(tbytes a.safetensors model.layers.1.self_attn.q_proj.weight)" ] ||
	fail "-u: a tensor one model has is not that model's"
# a base not among the models adds an input, not names
cat > ta.yml <<'Y'
merge_method: task_arithmetic
base_model: s.safetensors
models:
  - model: a.safetensors
    parameters: {weight: 0.5}
Y
expect_fail 1 "model 's.safetensors' lacks 9 of the 21 tensors" mk-pytorch ta.yml o2
mk-pytorch -i ta.yml o3 2> /dev/null
[ "$(names o3/model.safetensors | wc -l)" = 12 ] || fail "a base's names counted"
# refusals: both flags, a directory, what needs an architecture
expect_fail 2 "exclude each other" mk-pytorch -i -u lin.yml o4
no_out o4
sed 's|a.safetensors|a|' lin.yml > dir.yml
expect_fail 1 "not a regular file; mk-pytorch merges state-dict files" mk-pytorch dir.yml o5
no_out o5
printf 'merge_method: linear\nmodels:\n  - model: nope.safetensors\n    parameters: {weight: 1}\n' > nope.yml
expect_fail 1 "model 'nope.safetensors': No such file or directory" mk-pytorch nope.yml o6
printf 'merge_method: passthrough\nslices:\n  - sources:\n      - model: a.safetensors\n        layer_range: [0, 1]\n' > sl.yml
expect_fail 1 "slices: is not supported by mk-pytorch" mk-pytorch sl.yml o7
printf 'merge_method: linear\nmodels:\n  - model: a.safetensors\n  - model: b.safetensors\nparameters: {weight: 1}\ntokenizer_source: base\n' > tok.yml
expect_fail 1 "tokenizer_source: is not supported by mk-pytorch" mk-pytorch tok.yml o8
printf 'merge_method: slerp\nmodels:\n  - model: a.safetensors\n  - model: b.safetensors\nparameters: {t: 0.5}\n' > slerp.yml
expect_fail 1 "method 'slerp' needs a base model" mk-pytorch slerp.yml o9
no_out o9
# an existing OUT is refused; --force replaces it
expect_fail 1 "exists" mk-pytorch lin.yml out
mk-pytorch --force lin.yml out
# a state dict given to mk-yaml: said what it is
expect_fail 1 "model 'a.safetensors' is a file, not a model directory; a state dict is merged by mk-pytorch" mk-yaml lin.yml oy
# the CLI
mk-pytorch --help | grep -q -- "--tensor-intersection" || fail "--help"
mk-pytorch --version | grep -q "mk" || fail "--version"
expect_fail 2 "expected CONFIG and OUT" mk-pytorch lin.yml
mk-pytorch --lazy-unpickle --no-copy-tokenizer lin.yml out-ign 2> err.txt
grep -q "means nothing to mk-pytorch" err.txt || fail "mergekit's options are not noted"
