# Nothing outside a model's directory is read: a tokenizer file, config or
# weight shard that is a link leading out of the model is refused by name,
# and never reaches the plan (so it cannot travel to another host).
. "$MK_TOP/test/cli/lib.inc"
echo "secret-$$" > secret
mk_model() { rm -rf "$1"; cp -r "$MK_TOP/testdata/models/tiny-a" "$1"; }
cfg() { printf 'merge_method: linear\nmodels:\n  - model: %s\n    parameters: {weight: 1}\n' "$1" > "$1.yml"; }
# a tokenizer file: refused, with where it leads
mk_model m1
ln -sf "$PWD/secret" m1/tokenizer.model
cfg m1
expect_fail 1 "'tokenizer.model' leads outside the model's directory (to $PWD/secret)" mk-plan m1.yml -o plan1.mks
[ ! -e plan1.mks ] || ! grep -q "secret-$$" plan1.mks || fail "the secret reached the plan"
expect_fail 1 "leads outside the model's directory" mk-yaml m1.yml out1
[ ! -e out1 ] || fail "mk-yaml wrote out1"
# config.json and the weights
for f in config.json model.safetensors; do
	mk_model m2
	mv m2/$f "$f.real"
	ln -s "$PWD/$f.real" m2/$f
	cfg m2
	expect_fail 1 "'$f' leads outside the model's directory" mk-plan m2.yml -o /dev/null
	rm -f "$f.real"
done
# a link that stays inside the model is fine
mk_model m3
mkdir m3/sub
mv m3/tokenizer_config.json m3/sub/
ln -s sub/tokenizer_config.json m3/tokenizer_config.json
cfg m3
mk-yaml --quiet m3.yml out3
cmp out3/tokenizer_config.json m3/sub/tokenizer_config.json || fail "the inside link was not followed"
# a Hugging Face cache snapshot: its files are links into the repository's
# blobs, which is inside
hub=$PWD/hub/models--org--tiny
mkdir -p "$hub/blobs" "$hub/snapshots/abc123" "$hub/refs"
for f in $(cd m3 && ls | grep -v sub); do
	[ -f "m3/$f" ] || continue
	h=$(sha256sum "m3/$f" | cut -c1-64)
	cp -L "m3/$f" "$hub/blobs/$h"
	ln -s "../../blobs/$h" "$hub/snapshots/abc123/$f"
done
printf 'abc123' > "$hub/refs/main"
cfg "$hub/snapshots/abc123"
mk-plan "$hub/snapshots/abc123.yml" -o plan4.mks || fail "a cache snapshot's links into its blobs were refused"
echo "links out of a model refused (tokenizer, config, weights); links inside followed"
