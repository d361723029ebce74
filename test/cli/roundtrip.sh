# A model re-sharded through the pipe comes back bit-identical, with its
# config and tokenizer files, for several shard sizes and every reader.
. "$MK_TOP/test/cli/lib.inc"
mk-gen-model --shards 3 --all-dtypes --big-rows 20000 --seed 7 m
for io in uring mmap pread; do
	for size in 0 1 200K 1M 5B; do
		rm -rf out
		MK_IO=$io mk-fetch --model m --chunk-size 1MiB | mk-pack --out-shard-size $size out
		mk-st-diff m out || fail "tensors differ (io=$io size=$size)"
		for f in config.json generation_config.json tokenizer_config.json special_tokens_map.json tokenizer.json; do
			cmp m/$f out/$f || fail "$f differs"
		done
		[ ! -e out/README.md ] || fail "README.md is not a copy-mode file"
		[ ! -e out/.mk-journal ] || fail "journal left in OUT"
	done
	# size 0 and 5B: one file, no index; 1 byte: one shard per tensor
	n=$(ls out | grep -c safetensors) ; [ "$n" -eq 1 ] || fail "5B: $n safetensors files"
done
rm -rf out && mk-fetch --model m | mk-pack --out-shard-size 1 out
n=$(ls out/model-*-of-*.safetensors | wc -l)
t=$(grep -c '": "model-' out/model.safetensors.index.json)
[ "$n" -eq "$t" ] || fail "size 1: $n shards for $t tensors"
# a saved stream replays to the same bytes as the live pipe
mk-fetch --model m > s.mks
mk-pack --out-shard-size 200K live < s.mks
mk-fetch --model m | mk-pack --out-shard-size 200K piped
for f in live/*; do cmp "$f" "piped/$(basename "$f")" || fail "$f differs between replay and pipe"; done
# compressed streams give the same output
mk-fetch --compress --model m > z.mks
[ "$(wc -c < z.mks)" -lt "$(wc -c < s.mks)" ] || fail "--compress did not shrink the stream"
mk-pack --out-shard-size 200K zout < z.mks
for f in live/*; do cmp "$f" "zout/$(basename "$f")" || fail "$f differs with --compress"; done
# two models with disjoint names can be combined; leading-padded headers read
mk-gen-model --pad-leading --layers 1 --vocab 32 p
mk-fetch --model p | mk-pack bn0
mk-st-diff p bn0
# the index of a sharded output is written as Python's json.dump(indent=2)
# writes it (mergekit's form): tensor names outside ASCII, quotes,
# backslashes and control characters escaped as Python escapes them
mkdir -p u && python3 - u/model.safetensors <<'PY'
import json, struct, sys
names = ["caf\u00e9.weight", "emoji\U0001F600.bias", 'q"uote', "back\\slash", "tab\tnew\nline", "\u4e2d\u6587", "plain.weight"]
hdr, off = {}, 0
for n in names:
    hdr[n] = {"dtype": "F32", "shape": [4], "data_offsets": [off, off + 16]}
    off += 16
h = json.dumps(hdr, ensure_ascii=False).encode()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + bytes(off))
PY
mk-fetch --model u/model.safetensors | mk-pack --out-shard-size 1 uout
python3 - uout/model.safetensors.index.json <<'PY' || fail "the index is not written as Python's json.dump(indent=2) writes it"
import json, sys
raw = open(sys.argv[1], "rb").read().decode("ascii")
if raw != json.dumps(json.loads(raw), indent=2):
    sys.exit("index differs from json.dumps(indent=2) of itself:\n" + raw)
if len(json.loads(raw)["weight_map"]) != 7:
    sys.exit("not every tensor is in the index")
PY
# --basename: the same bytes under another name (a PEFT adapter's
# adapter_model.*), one file or shards with their index
mk-fetch --model m | mk-pack --out-shard-size 0 --basename adapter_model adapt1
[ -f adapt1/adapter_model.safetensors ] && [ ! -e adapt1/model.safetensors ] ||
	{ ls adapt1; fail "--basename: no adapter_model.safetensors"; }
mk-fetch --model m | mk-pack --out-shard-size 0 plain1
cmp adapt1/adapter_model.safetensors plain1/model.safetensors || fail "--basename changed the bytes"
mk-fetch --model m | mk-pack --out-shard-size 1 --basename adapter_model adapt2
ls adapt2 | grep -q '^adapter_model-00001-of-' || { ls adapt2; fail "--basename: no adapter_model shards"; }
[ -f adapt2/adapter_model.safetensors.index.json ] || fail "--basename: no adapter_model.safetensors.index.json"
grep -q '"adapter_model-00001-of-' adapt2/adapter_model.safetensors.index.json || fail "--basename: the index names other files"
ls adapt2 | grep -q '^model' && fail "--basename: model.* written too"
expect_fail 2 "--basename: weight file name 'a/b': only letters" mk-pack --basename a/b x
expect_fail 2 "--basename: weight file name '..': 1 to 64 characters" mk-pack --basename .. x
# a FILE frame named as this run's weight file is refused; under the
# default basename the same name is an ordinary file
mk-forge named-file=adapter_model.safetensors > nf.mks
expect_fail 1 "'adapter_model.safetensors' would overwrite a weight file" mk-pack --basename adapter_model -i nf.mks nfout
mk-pack -i nf.mks nfplain && [ -f nfplain/adapter_model.safetensors ] && [ -f nfplain/model.safetensors ] ||
	fail "adapter_model.safetensors refused without --basename"
echo "roundtrip: every reader and shard size, replay, compression, index and --basename checked"
