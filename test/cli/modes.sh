# mk-yaml in one process (the default) and mk-yaml --processes write the
# same files with the same bytes (sha256 of each, and the list of files):
# every bundled configuration, a tokenizer merge, a LoRA merge, and
# embedding-heavy BF16 models (a 65536-token vocabulary) with three
# inputs, plain, held, under --max-memory, in small shards and spilled.
. "$MK_TOP/test/cli/lib.inc"
W=$PWD
# same ARGS... CONFIG: both modes into $W/one/out and $W/procs/out, compared
same() {
	rm -rf "$W/one" "$W/procs"
	mkdir "$W/one" "$W/procs"
	mk-yaml --quiet "$@" "$W/one/out" 2> "$W/one.err" || { cat "$W/one.err" >&2; fail "one process: $*"; }
	mk-yaml --quiet --processes "$@" "$W/procs/out" 2> "$W/procs.err" || { cat "$W/procs.err" >&2; fail "--processes: $*"; }
	(cd "$W/one/out" && find . -type f | sort | xargs sha256sum) > "$W/one.sum"
	(cd "$W/procs/out" && find . -type f | sort | xargs sha256sum) > "$W/procs.sum"
	[ -s "$W/one.sum" ] || fail "$*: no files"
	cmp "$W/one.sum" "$W/procs.sum" || { diff "$W/one.sum" "$W/procs.sum" >&2; fail "$*: one process and --processes differ"; }
	n=$((n + 1))
}
n=0
# (the bundled configurations name their models from the top directory)
cd "$MK_TOP"
for cfg in testdata/configs/*.yml test/conformance/tokenizer-vocab-tokens-f32.yml test/conformance/lora-linear-f32.yml; do
	same "$cfg"
done
cd "$W"
for s in 1 2 3; do
	mk-gen-model --dtype BF16 --hidden 256 --inter 512 --layers 2 --vocab 65536 --seed $s e$s > /dev/null
done
printf 'merge_method: linear\nmodels:\n  - model: e1\n    parameters: {weight: 0.5}\n  - model: e2\n    parameters: {weight: 0.3}\n  - model: e3\n    parameters: {weight: 0.2}\n' > lin.yml
printf 'merge_method: ties\nbase_model: e1\nmodels:\n  - model: e2\n    parameters: {weight: 0.6, density: 0.5}\n  - model: e3\n    parameters: {weight: 0.4, density: 0.5}\n' > ties.yml
printf 'merge_method: slerp\nbase_model: e1\nmodels:\n  - model: e2\nparameters: {t: 0.3}\n' > slerp.yml
same lin.yml
# held jobs (the embeddings): in one process the frames mk-fetch maps
# are kept as they lie, as processes their bytes are copied
same ties.yml
same slerp.yml
same --max-memory 64M lin.yml
same --out-shard-size 20M -j 1 lin.yml
[ "$(ls one/out/*.safetensors | wc -l)" -ge 2 ] || fail "--out-shard-size 20M: not in shards"
mkdir -p spill
same --max-memory 64M --spill spill ties.yml
echo "$n merges: the same files and bytes in one process and as processes"
