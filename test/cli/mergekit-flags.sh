# mk-yaml takes every flag of mergekit-yaml 0.1.5 (but
# --unsafe-truncate-embeddings, tested where it is implemented): each one,
# and its --no- form where mergekit has one, given to a slerp of the tiny
# models, leaves the output as it is without it, byte for byte; those that
# change the output by design (--no-copy-tokenizer, --no-write-model-card,
# --out-shard-size) change only what they say.
. "$MK_TOP/test/cli/lib.inc"
A=$MK_TOP/testdata/models/tiny-a
B=$MK_TOP/testdata/models/tiny-b
slerp_config c.yml "$A" "$B"
mk-yaml --quiet c.yml base/out 2> err.txt || { cat err.txt >&2; fail "the plain merge failed"; }
[ -f base/out/README.md ] || fail "no README.md"

n=0
# same FLAG...: the output of the merge with these flags is the plain one
same() {
	n=$((n + 1))
	mk-yaml --quiet "$@" c.yml "r$n/out" 2> err.txt || { cat err.txt >&2; fail "mk-yaml $*: failed"; }
	diff -r base/out "r$n/out" > diff.txt || { cat diff.txt >&2; fail "mk-yaml $*: the output differs"; }
	rm -rf "r$n"
}
for f in allow-crimes trust-remote-code quiet cuda low-cpu-memory lazy-unpickle read-to-gpu multi-gpu \
	async-write clone-tensors safe-serialization; do
	same "--$f"
	same "--no-$f"
done
same --copy-tokenizer
same --write-model-card
same --gpu-rich
same --transformers-cache "$PWD/hf-cache"
same --lora-merge-cache "$PWD/lora-cache"
same --lora-merge-dtype bfloat16
same --random-seed 7
same -v
same -vvv
same -j 2
same --num-threads 3
same --num-threads=1
same --device cpu
same --device cuda
same --device=auto
same --write-threads 4
same --write-threads=2
same --out-shard-size 5B
same --out-shard-size=5b
# all at once, the forms mergekit's --help shows
same --no-allow-crimes --no-trust-remote-code --transformers-cache "$PWD/hf-cache" --lora-merge-cache x \
	--lora-merge-dtype float32 --random-seed 1 -v --no-quiet --no-cuda --device cpu --no-low-cpu-memory \
	--no-lazy-unpickle --no-read-to-gpu --no-multi-gpu -j 1 --no-async-write --write-threads 1 \
	--out-shard-size 5B --copy-tokenizer --no-clone-tensors --write-model-card --safe-serialization
echo "mergekit-flags: $n runs with mergekit's flags wrote the plain output"

# the notes say what was ignored, on standard error only
mk-yaml --lazy-unpickle --gpu-rich c.yml notes/out > out.txt 2> err.txt
err_has "note: --lazy-unpickle means nothing to mk-yaml" "--lazy-unpickle: no note"
err_has "note: --gpu-rich is --cuda here" "--gpu-rich: no note"
[ ! -s out.txt ] || fail "notes on standard output"

# the three that change the output change what they say only
mk-yaml --quiet --no-write-model-card c.yml nocard/out
[ ! -e nocard/out/README.md ] && [ ! -e nocard/out/mergekit_config.yml ] || fail "--no-write-model-card wrote a card"
diff -r -x README.md -x mergekit_config.yml base/out nocard/out || fail "--no-write-model-card changed more"
mk-yaml --quiet --no-copy-tokenizer c.yml notok/out
tok=$(cd base/out && ls | grep -i tok || true)
[ -n "$tok" ] || fail "the plain merge copied no tokenizer file"
for f in $tok; do [ ! -e "notok/out/$f" ] || fail "--no-copy-tokenizer copied $f"; done
mk-yaml --quiet --out-shard-size 20k c.yml small/out
[ "$(ls small/out/*.safetensors | wc -l)" -gt 1 ] || fail "--out-shard-size 20k wrote one shard"
expect_fail 2 "--out-shard-size" mk-yaml --out-shard-size lots c.yml bad/out
expect_fail 2 "--num-threads" mk-yaml -j none c.yml bad/out
echo "mergekit-flags: --no-write-model-card, --no-copy-tokenizer and --out-shard-size change what they say"

# --cuda, --device cuda, --read-to-gpu on a host without a usable GPU (no
# emulation asked for): a warning that says so, the merge on the CPU (the
# same output, above); with --strict an error and no output
if [ -z "${MK_CUDA_EMULATE:-}" ] && ! nvidia-smi -L > /dev/null 2>&1; then
	for f in "--cuda" "--device cuda:0" "--read-to-gpu"; do
		mk-yaml $f c.yml nogpu/out > /dev/null 2> err.txt || { cat err.txt; fail "$f without a GPU failed"; }
		err_has "cuda: " "$f without a GPU: no word of it"
		err_has "merging on the CPU" "$f without a GPU: does not say it merges on the CPU"
		rm -rf nogpu
	done
	expect_fail 1 "no GPU to merge on (strict)" mk-yaml --quiet --cuda --strict c.yml strictgpu/out
	no_out strictgpu/out
	if mk-merge --cuda --strict < /dev/null > /dev/null 2> err.txt; then fail "mk-merge --cuda --strict without a GPU ran"; fi
	err_has "--cuda (with --strict)" "mk-merge --cuda --strict: no error naming it"
fi
expect_fail 2 "expected cpu, cuda, cuda:N or auto" mk-yaml --device tpu c.yml bad/out
