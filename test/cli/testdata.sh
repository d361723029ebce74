# The bundled tiny models are what the generator makes (deterministic).
. "$MK_TOP/test/cli/lib.inc"
mk-gen-model --seed 1 a
mk-gen-model --seed 2 --shards 2 b
for f in "$MK_TOP"/testdata/models/tiny-a/*; do cmp "$f" "a/$(basename "$f")"; done
for f in "$MK_TOP"/testdata/models/tiny-b/*; do cmp "$f" "b/$(basename "$f")"; done
# and the README's first command works on them
mk-fetch --model "$MK_TOP/testdata/models/tiny-a" | mk-pack --out-shard-size 200K out
[ -f out/model.safetensors.index.json ] || fail "200K did not shard tiny-a"
mk-st-diff "$MK_TOP/testdata/models/tiny-a" out
# the conformance models too
mkdir -p c
for dt in F32 BF16; do
	l=$(echo $dt | tr A-Z a-z)
	for s in a b c; do
		seed=$(( $(printf '%d' "'$s") + 100 ))
		mk-gen-model --dtype $dt --layers 3 --hidden 16 --vocab 32 --seed $seed c/llama-$l-$s
		mk-gen-model --arch mistral --dtype $dt --layers 3 --hidden 16 --vocab 32 --seed $((seed + 50)) c/mistral-$l-$s
	done
done
mk-gen-model --dtype F32 --layers 3 --hidden 16 --vocab 40 --seed 170 c/llama-f32-v40
for s in a b; do
	mk-gen-model --dtype F32 --layers 3 --hidden 16 --vocab 32 --bpe-tokenizer --seed $(( $(printf '%d' "'$s") + 200 )) c/llama-f32-tok-$s
done
for d in "$MK_TOP"/testdata/models/conf/*; do
	for f in "$d"/*; do cmp "$f" "c/$(basename "$d")/$(basename "$f")"; done
done
