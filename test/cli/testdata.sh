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
