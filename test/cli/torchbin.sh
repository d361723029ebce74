# PyTorch checkpoints (torch.save's zip format) as inputs: the same merge
# over .bin copies of the models and over their safetensors gives the same
# bytes, whatever the layout (one file, shards with an index, tensors at a
# storage offset, tied tensors sharing a storage, views that are not
# contiguous); checkpoints mk does not
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
# pickles of the later protocols (torch.save(..., pickle_protocol=4 or 5)):
# MEMOIZE numbers the memo by its count of entries
for proto in 3 4 5; do
	$GEN a a-p$proto --protocol $proto
	mk-fetch --model a-p$proto | mk-pack a-p$proto-copy
	mk-st-diff a a-p$proto-copy
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
# views that are not contiguous (--strided: transposed, column slices at an
# offset, every other column or element; tied to one storage): read in
# order, the values those of the safetensors they came from, computed
# here from its bytes and the definition of each view (Python's struct)
$GEN a a-view --strided --tie model.embed_tokens.weight=lm_head.weight --expand model.layers.0.self_attn.q_proj.weight
$GEN b b-view --strided --shards 3 --view model.embed_tokens.weight=0
for cs in 4MiB 4KiB 1KiB; do
	mk-fetch --chunk-size $cs --model a-view | mk-pack a-view-$cs
	mk-fetch --chunk-size $cs --model b-view | mk-pack b-view-$cs
	mk-st-diff b b-view-$cs || fail "views, chunks of $cs: b's tensors differ"
done
python3 - a a-view-4MiB a-view-1KiB <<'PY' || fail "views: the values read are not the expected ones"
import json, struct, sys
def tensors(d):
    raw = open(d + "/model.safetensors", "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}
src = tensors(sys.argv[1])
want = {k: b for k, (s, b) in src.items()}
want["lm_head.weight"] = want["model.embed_tokens.weight"]
q = "model.layers.0.self_attn.q_proj.weight"
rows, cols = src[q][0]
want[q] = src[q][1][:cols * 4] * rows  # the first row, expanded (stride 0)
for d in sys.argv[2:]:
    got = tensors(d)
    assert sorted(got) == sorted(want), d
    for k in want:
        assert got[k][1] == want[k], (d, k)
PY
# merges over views equal those over the safetensors, byte for byte: the
# pipe with chunks small enough that a transposed tensor (1.5 MiB, float32)
# is read whole once and its chunks gathered from it, and mk-yaml
mk-gen-model --seed 5 --dtype F32 --layers 1 --hidden 640 --inter 64 --vocab 64 w1 > /dev/null
mk-gen-model --seed 6 --dtype F32 --layers 1 --hidden 640 --inter 64 --vocab 64 w2 > /dev/null
$GEN w1 w1-view --strided --view model.layers.0.self_attn.q_proj.weight=0 --view model.layers.0.self_attn.o_proj.weight=1
$GEN w2 w2-view --strided --shards 2 --view model.layers.0.self_attn.q_proj.weight=0 --view model.layers.0.self_attn.k_proj.weight=0
cfg wst.yml w1 w2
cfg wview.yml w1-view w2-view
mk-yaml wst.yml wst-out
mk-yaml wview.yml wview-out
cmp wst-out/model.safetensors wview-out/model.safetensors || fail "the merge over views differs from the one over safetensors"
mk-plan wview.yml > wview.plan
for cs in 64KiB 4KiB; do
	mk-fetch --chunk-size $cs -i wview.plan | mk-merge | mk-pack wview-$cs
	cmp wst-out/model.safetensors wview-$cs/model.safetensors || fail "views, the pipe with chunks of $cs differs"
done
# a union of vocabularies: rows of a transposed embedding picked one by one
mk-gen-model --seed 1 --vocab 64 --dtype F32 --bpe-tokenizer v-base > /dev/null
mk-gen-model --seed 2 --vocab 66 --dtype F32 --bpe-tokenizer='<s>,</s>,<|im_start|>,<|im_end|>' v-chat > /dev/null
$GEN v-base v-base-view --strided --view model.embed_tokens.weight=0
$GEN v-chat v-chat-view --strided --view model.embed_tokens.weight=2 --view lm_head.weight=0
for d in st view; do
	if [ $d = st ]; then x=v-base y=v-chat; else x=v-base-view y=v-chat-view; fi
	printf 'merge_method: linear\nmodels:\n  - model: %s\n    parameters: {weight: 1}\n  - model: %s\n    parameters: {weight: 2}\ntokenizer_source: union\ndtype: float32\n' $x $y > union-$d.yml
	mk-yaml union-$d.yml union-$d
done
cmp union-st/model.safetensors union-view/model.safetensors || fail "a union over views differs from the one over safetensors"
# one .pt / .pth file: torch.save names its top folder after the file's
# stem ("model/data.pkl", not "archive/"): read whatever it is (as a model
# directory's pytorch_model.bin; a lone .pt is read by mk_torchbin_open,
# test_torchbin)
$GEN a a-pt --file model.pt --strided
$GEN b a-pth --file weights.v2.pth
python3 - a-pt/model.pt a-pth/weights.v2.pth <<'PY' || fail "the generator's .pt folders"
import sys, zipfile
assert zipfile.ZipFile(sys.argv[1]).namelist()[0] == "model/data.pkl"
assert zipfile.ZipFile(sys.argv[2]).namelist()[0] == "weights.v2/data.pkl"
PY
mv a-pt/model.pt a-pt/pytorch_model.bin
mv a-pth/weights.v2.pth a-pth/pytorch_model.bin
mk-fetch --model a-pt | mk-pack a-pt-copy
mk-st-diff a a-pt-copy
mk-fetch --model a-pth | mk-pack a-pth-copy
mk-st-diff b a-pth-copy
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
