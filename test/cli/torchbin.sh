# PyTorch checkpoints (torch.save's zip format) as inputs: the same merge
# over .bin copies of the models and over their safetensors gives the same
# bytes, whatever the layout (one file, shards with an index, tensors at a
# storage offset, tied tensors sharing a storage); checkpoints mk does not
# read are refused by name before any weight is read, with no OUT.  The
# .bin files come from test/tools/mk-gen-torchbin.py (Python's standard
# library; no torch).
. "$MK_TOP/test/cli/lib.inc"
command -v python3 >/dev/null 2>&1 || exit 77
GEN="python3 $MK_TOP/test/tools/mk-gen-torchbin.py"
mk-gen-model --seed 1 --dtype F32 a > /dev/null
mk-gen-model --seed 2 --dtype BF16 --shards 2 b > /dev/null
$GEN a a-bin
$GEN b b-bin --shards 3 --offset
$GEN a a-tied --tie model.embed_tokens.weight=lm_head.weight
[ -f b-bin/pytorch_model.bin.index.json ] && [ ! -e b-bin/model.safetensors ] || fail "the generator wrote no shards"
# copy mode: the tensors as they were
for d in a b; do
	mk-fetch --model $d-bin | mk-pack $d-copy
	mk-st-diff $d $d-copy
done
# merges: .bin inputs and safetensors inputs, the same output bytes
cfg() { # cfg FILE A B
	printf 'merge_method: slerp\nbase_model: %s\nmodels:\n  - model: %s\n  - model: %s\nparameters: {t: 0.3}\ndtype: bfloat16\n' "$2" "$2" "$3" > "$1"
}
cfg st.yml a b
cfg bin.yml a-bin b-bin
mk-yaml st.yml st-out
mk-yaml bin.yml bin-out
cmp st-out/model.safetensors bin-out/model.safetensors || fail "the merge over .bin differs from the one over safetensors"
# a saved plan pins the shards: mk-fetch checks them again
mk-plan bin.yml > bin.plan
mk-fetch -i bin.plan | mk-merge | mk-pack bin-pipe
cmp bin-pipe/model.safetensors st-out/model.safetensors || fail "the pipe over .bin differs"
# tied: both names read from the one storage
mk-fetch --model a-tied | mk-pack tied-copy
python3 - tied-copy/model.safetensors a/model.safetensors <<'PY' || fail "tied: lm_head is not embed_tokens' values"
import json, struct, sys
def t(p):
    raw = open(p, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
    return lambda k: raw[8 + n + h[k]["data_offsets"][0]:8 + n + h[k]["data_offsets"][1]]
got, src = t(sys.argv[1]), t(sys.argv[2])
assert got("lm_head.weight") == src("model.embed_tokens.weight") == got("model.embed_tokens.weight")
PY
# refused: a global a state dict does not use, a deflated storage, the
# legacy format; each by mk-plan, naming the file, no OUT
$GEN a evil --evil os.system
$GEN a defl --deflate
$GEN a leg --legacy
for case in "evil:data.pkl names the global os.system, which a state dict does not use: refused, nothing run" \
	    "defl:tensor 'lm_head.weight': its storage is compressed (deflated): not read" \
	    "leg:a PyTorch checkpoint in the legacy (pre-1.6) format"; do
	d=${case%%:*} msg=${case#*:}
	cfg bad.yml a $d
	expect_fail 1 "$d/pytorch_model.bin: $msg" mk-yaml bad.yml bad-out
	no_out bad-out
done
