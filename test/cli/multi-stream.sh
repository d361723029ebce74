# mk-multi --no-intermediates: a chain of three merges (s1 -> s2 -> final),
# each read by the next only, streams both links and gives the bytes of
# the run that writes its intermediates (sha256 of every output file), no
# DIR/NAME of a streamed merge written; a merge whose reader cannot take
# it as a stream (ties over the memory budget, its tokenizer read, read by
# two merges) is written, with a note saying why, and the bytes are still
# those of the written run; a failure inside a streamed chain leaves no
# output of the chain; the chain's peak RSS stays under --max-memory plus
# the process's own.
. "$MK_TOP/test/cli/lib.inc"
# the descriptions go to TMPDIR: a private one, to see that none is left
mkdir tmp
TMPDIR=$(pwd)/tmp
export TMPDIR
gen() { mk-gen-model --dtype F32 --layers 2 --hidden 16 --vocab "$3" --seed "$2" --bpe-tokenizer${4:+="$4"} "$1" > /dev/null; }
gen a 1 32
gen b 2 32
gen c 3 32
gen d 4 34 '<s>,</s>,<|im_start|>,<|im_end|>'   # a vocabulary of its own
cat > chain.yml <<'Y'
name: s1
merge_method: linear
models:
  - model: a
    parameters: {weight: 0.4}
  - model: b
    parameters: {weight: 0.6}
dtype: float16
---
name: s2
merge_method: slerp
base_model: s1
models:
  - model: s1
  - model: c
parameters:
  t: [0.3, 0.6]
dtype: float32
---
merge_method: task_arithmetic
base_model: a
models:
  - model: s2
    parameters: {weight: 0.7}
  - model: c
    parameters: {weight: 0.3}
dtype: bfloat16
Y
# run_both RECIPE [OPTIONS]: the recipe written (in w/) and streamed (in
# s/), same names, so the cards and configurations can be the same bytes
run_both() {
	r=$1
	shift
	rm -rf w s
	mkdir w s
	for d in w s; do
		for m in a b c d e ha hb hc ta tb tc va vb vc; do [ ! -e $m ] || ln -s ../$m $d/; done
		cp "$r" $d/r.yml
	done
	(cd w && mk-multi "$@" r.yml -I inter --out-path out 2> err.txt) || { cat w/err.txt; fail "$r: the written run failed"; }
	(cd s && mk-multi -v --no-intermediates "$@" r.yml -I inter --out-path out 2> err.txt) ||
		{ cat s/err.txt; fail "$r: the streamed run failed"; }
	(cd w/out && sha256sum -- *) > w.sum
	(cd s/out && sha256sum -- *) > s.sum
	[ "$(wc -l < w.sum)" -ge 5 ] || fail "$r: the output has too few files"
	cmp w.sum s.sum || { diff w.sum s.sum; fail "$r: streamed output differs from the written run's"; }
}
run_both chain.yml
grep -q "streaming 's1'" s/err.txt || { cat s/err.txt; fail "s1 not streamed"; }
grep -q "streaming 's2'" s/err.txt || fail "s2 not streamed"
grep -q "is written" s/err.txt && { cat s/err.txt; fail "a link of the chain was written"; }
[ -d s/inter ] && [ -z "$(ls -A s/inter)" ] || { ls -R s/inter; fail "a streamed merge wrote DIR/NAME"; }
[ -f w/inter/s1/model.safetensors ] && [ -f w/inter/s2/model.safetensors ] || fail "the written run lacks its intermediates"
[ -z "$(ls -A tmp)" ] || { ls -R tmp; fail "the descriptions' scratch directory was left in TMPDIR"; }
# inputs in three shards, twelve layers (layers.10 sorts before
# layers.2): the merges make their tensors in their base's file order,
# the description lays them out so, and both links still stream
for m in a b c; do
	mk-gen-model --dtype F32 --layers 12 --hidden 16 --vocab 32 --shards 3 --seed $(printf %d "'$m") h$m > /dev/null
done
sed -e 's/model: \([abc]\)$/model: h\1/' chain.yml > sharded.yml
run_both sharded.yml
grep -q "streaming 's1'" s/err.txt && grep -q "streaming 's2'" s/err.txt && [ -z "$(ls -A s/inter)" ] ||
	{ cat s/err.txt; fail "sharded inputs: the chain was not streamed"; }
run_both chain.yml
# --lazy (the default) again: the final merge is there, so s1 and s2
# are not needed and nothing is made (nor written)
(cd s && mk-multi --no-intermediates r.yml -I inter --out-path out 2> err2.txt)
grep -q "skipped, not needed: 's1'" s/err2.txt && grep -q "skipped, not needed: 's2'" s/err2.txt &&
	grep -q "skipped, already there: 'final'" s/err2.txt || { cat s/err2.txt; fail "--lazy: not skipped"; }
[ -z "$(ls -A s/inter)" ] || fail "--lazy: an unneeded merge was written"
(cd s/out && sha256sum -- *) | cmp - s.sum || fail "--lazy: the output changed"
# the final merge gone: the chain is made again, streamed
rm -rf s/out
(cd s && mk-multi -v --no-intermediates r.yml -I inter --out-path out 2> err2.txt)
grep -q "streaming 's1'" s/err2.txt || { cat s/err2.txt; fail "the chain was not streamed again"; }
(cd s/out && sha256sum -- *) | cmp - s.sum || fail "the chain made again differs"
# one thread and a small chunk size: the stream cut differently than
# the reader wants (mk-merge writes at its own chunk ranges)
run_both chain.yml -j 1 --max-memory 3M
grep -q "streaming 's2'" s/err.txt || fail "-j 1: s2 not streamed"
[ -z "$(ls -A s/inter)" ] || fail "-j 1: a streamed merge wrote DIR/NAME"

# ties with statistics passes over the budget (tensors of 2.5 MiB, the
# least merge budget 4 MiB): its jobs read s1 twice, so s1 is written
# (said), s2 still streams into final
for m in a b c; do
	mk-gen-model --dtype F32 --layers 1 --hidden 512 --vocab 32 --seed $(printf %d "'$m") t$m > /dev/null
done
sed -e '/^name: s2/,/^---/{s/merge_method: slerp/merge_method: ties/;s/^  t: .*/  density: 0.5\n  weight: 0.5/}' \
	-e 's/model: \([abc]\)$/model: t\1/' -e '/^dtype: float16/d' chain.yml > ties.yml
grep -q "merge_method: ties" ties.yml && grep -q "model: tc" ties.yml || fail "ties.yml not made"
run_both ties.yml --max-memory 1k
grep -q "'s1' is written to inter/s1, not streamed into 's2'" s/err.txt || { cat s/err.txt; fail "ties: no note for s1"; }
[ -f s/inter/s1/model.safetensors ] || fail "ties: s1 not written"
grep -q "streaming 's2'" s/err.txt && [ ! -e s/inter/s2 ] || fail "ties: s2 not streamed"

# s2's tokenizer from s1, the vocabularies the same: s1's tokenizer
# files from its description, the tensors streamed
sed -e '/^name: s2/a tokenizer_source: s1' chain.yml > tok.yml
run_both tok.yml
grep -q "streaming 's1'" s/err.txt && [ -z "$(ls -A s/inter)" ] || { cat s/err.txt; fail "tokenizer_source: s1 not streamed"; }
cmp s/out/tokenizer.json a/tokenizer.json || fail "tokenizer_source: not s1's (a's) tokenizer"
# a union with another vocabulary, in the same order: s1's rows as
# stored, streamed
sed -e '/^name: s2/a tokenizer_source: union' -e '/^name: s2/,/^---/s/  - model: c$/  - model: d/' chain.yml > union.yml
run_both union.yml
grep -q "streaming 's1'" s/err.txt && [ -z "$(ls -A s/inter)" ] || { cat s/err.txt; fail "union: s1 not streamed"; }
# the final merge takes a's vocabulary (tokenizer_source: a), which
# leaves out s1's last row: the rest of that embedding's last frame is
# dropped, not handed to the next tensor read from the stream (tied
# models: the embedding is the only tensor with a vocabulary)
for m in va:1:32: vb:2:33:'<|im_start|>' vc:3:33:'<|im_start|>'; do
	IFS=: read -r n sd v x <<EOT
$m
EOT
	mk-gen-model --dtype F32 --layers 2 --hidden 16 --vocab "$v" --seed "$sd" --tied --bpe-tokenizer${x:+="$x"} "$n" > /dev/null
done
cat > vocab-drop.yml <<'Y'
name: s1
merge_method: linear
models:
  - model: vb
    parameters: {weight: 0.4}
  - model: vc
    parameters: {weight: 0.6}
dtype: float32
---
merge_method: linear
models:
  - model: s1
    parameters: {weight: 0.5}
  - model: va
    parameters: {weight: 0.5}
tokenizer_source: va
dtype: float32
Y
run_both vocab-drop.yml
grep -q "streaming 's1'" s/err.txt && [ -z "$(ls -A s/inter)" ] || { cat s/err.txt; fail "vocab-drop: s1 not streamed"; }
# a union led by a vocabulary that has s1's tokens in another order
# (from its 11th on): s1's rows read out of their order, so s1 is
# written (said)
mk-gen-model --dtype F32 --layers 2 --hidden 16 --vocab 32 --seed 5 --tok-skip 10 --bpe-tokenizer e > /dev/null
sed -e '/^name: s2/,/^---/{s/^base_model: s1/base_model: e/;s/  - model: c$/  - model: e/}' -e '/^name: s2/a tokenizer_source: union' \
	chain.yml > reorder.yml
grep -q "^base_model: e" reorder.yml || fail "reorder.yml not made"
run_both reorder.yml
grep -q "'s1' is written to inter/s1, not streamed into 's2': .*in another order" s/err.txt ||
	{ cat s/err.txt; fail "reordered vocabulary: no note for s1"; }
[ -f s/inter/s1/model.safetensors ] || fail "reordered vocabulary: s1 not written"
[ ! -e s/inter/s2 ] || fail "reordered vocabulary: s2 written"

# s1 read by two merges: written, said so
sed -e '/^merge_method: task_arithmetic/,$s/  - model: c$/  - model: s1/' chain.yml > two.yml
[ "$(grep -c 'model: s1' two.yml)" = 3 ] || { cat two.yml; fail "two.yml not made"; }
run_both two.yml
grep -q "'s1' is written to inter/s1: more than one merge reads it" s/err.txt || { cat s/err.txt; fail "two readers: no note"; }

# a failure inside the chain (the 40th pread of the models fails): no
# output of the chain appears, nothing half-written
rm -rf f
mkdir f
ln -s ../a ../b ../c f/
P=$MK_TOP/build/preload/faultio.so
if [ -f "$P" ] && [ "$MK_SAN" != 1 ]; then
	(cd f && MK_IO=pread MK_FAULT_IO=pread:40:eio LD_PRELOAD=$P mk-multi --no-intermediates ../chain.yml -I inter --out-path out \
		2> err.txt > /dev/null) && fail "a failing chain succeeded"
	grep -q "merge '[a-z0-9]*': mk-fetch: .*Input/output error" f/err.txt || { cat f/err.txt; fail "the failure is not said"; }
	no_out f/out
	no_out f/inter/s1
	no_out f/inter/s2
	[ -z "$(ls -A tmp)" ] || { ls -R tmp; fail "a failed chain left its descriptions in TMPDIR"; }
fi

# the middle merge fails as it merges (--strict: its float16 output
# overflows): the chain stops, none of its outputs appears
sed -e '/^name: s2/,/^---/{s/merge_method: slerp/merge_method: linear/;s/^  t: .*/  weight: 1000000\n  normalize: false/;s/^dtype: float32/dtype: float16/}' \
	chain.yml > over.yml
rm -rf f && mkdir f && ln -s ../a ../b ../c f/
(cd f && mk-multi --strict --no-intermediates ../over.yml -I inter --out-path out 2> err.txt) && fail "an overflowing chain succeeded"
grep -q "merge 's2': mk-merge: .*(--strict)" f/err.txt || { cat f/err.txt; fail "the failure is not s2's"; }
no_out f/out
no_out f/inter/s1
no_out f/inter/s2

# peak RSS: a chain over a 64 MiB tensor under --max-memory 48M stays
# under it plus the process's own (code, the plan, thread stacks)
if [ "$MK_SAN" != 1 ]; then
	mk-gen-model --dtype F32 --hidden 1024 --layers 1 --big-rows 16384 --seed 1 ba > /dev/null
	mk-gen-model --dtype F32 --hidden 1024 --layers 1 --big-rows 16384 --seed 2 bb > /dev/null
	# single-pass methods only (slerp's norms would be a second pass over
	# a tensor this size)
	sed -e 's/model: a$/model: ba/;s/model: b$/model: bb/;s/model: c$/model: bb/;s/^dtype: .*$/dtype: float32/' \
		-e 's/merge_method: slerp/merge_method: linear/;s/^  t: .*$/  weight: 0.5/' chain.yml > big.yml
	mk-rss big.rss mk-multi --no-intermediates big.yml -I binter --out-path bout --max-memory 48M 2> err.txt ||
		{ cat err.txt; fail "the big chain failed"; }
	[ -z "$(ls -A binter)" ] || fail "the big chain wrote DIR/NAME"
	k=$(cat big.rss)
	echo "three streamed merges of a 64 MiB tensor, --max-memory 48M: peak RSS $k KiB"
	[ "$k" -lt $(((48 + 24) * 1024)) ] || fail "peak RSS $k KiB over 48 MiB + 24 MiB"
fi
