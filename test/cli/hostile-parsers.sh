# Hostile input to the parsers: a small file that would make a parser
# build without bound or work without end is refused quickly, exit 1,
# with a message naming the file and the bound it hit, no OUT, and a
# bounded peak RSS: torch.save pickles (data.pkl), tokenizer.json's
# encoder, YAML configurations and recipes; checkpoints with no tensors;
# messages that say what happened.
. "$MK_TOP/test/cli/lib.inc"
mk-gen-model --layers 1 --seed 1 a > /dev/null
# rss_under KIB FILE WHAT: the peak RSS mk-rss wrote to FILE is under KIB
# (not under the sanitizers, whose shadow memory it would count)
rss_under() {
	[ "$MK_SAN" = 1 ] || [ "$(cat "$2")" -lt "$1" ] || fail "$3: peak RSS $(cat "$2") KiB, not under $1 KiB"
}
# refuse MSG CMD...: exit 1 within 60 s, MSG on stderr, no OUT
refuse() {
	msg=$1
	shift
	expect_fail 1 "$msg" timeout 60 mk-rss rss "$@"
	no_out out
}

# --- torch.save pickles --------------------------------------------------
# gen.py MODE N FILE: a torch.save zip whose data.pkl is MODE repeated N
# times (runs of cheap opcodes, deep nesting, memo abuse, fan-out, strings
# longer than the file, N tiny tensors)
if command -v python3 >/dev/null 2>&1; then
cat > gen.py <<'PY'
import struct, sys, zipfile
mode, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
P = b"\x80\x02"
def u32(x): return struct.pack("<I", x)
def s(t): t = t.encode(); return b"\x8c" + bytes([len(t)]) + t
runs = {"none": b"N", "emptylist": b"]", "emptydict": b"}", "emptytuple": b")", "mark": b"(",
        "shortstr": b"\x8c\x02ab", "binint": b"J\x01\x02\x03\x04", "true": b"\x88"}
if mode in runs:
    pkl = P + runs[mode] * n + b"."
elif mode == "tensors":  # an OrderedDict of n one-element tensors, views of one storage
    b = [P, b"ccollections\nOrderedDict\nq\x00)Rq\x01("]
    for i in range(n):
        g = b"h\x02" if i else b"ctorch._utils\n_rebuild_tensor_v2\nq\x02"
        st = b"h\x03" if i else b"ctorch\nFloatStorage\nq\x03"
        b.append(s("t%d" % i) + g + b"((" + s("storage") + st + s("0") + s("cpu") + b"K\x01tQK\x00))\x89h\x00)RtR")
        if i % 1000 == 999:
            b.append(b"u(")
    pkl = b"".join(b) + b"u."
elif mode == "tuple1": pkl = P + b")" + b"\x85" * n + b"."
elif mode == "list": pkl = P + b"]" * n + b"a" * (n - 1) + b"."
elif mode == "dict": pkl = P + b"}" * n + (s("k") + b"\x93" * 0) * 0 + b"."
elif mode == "memo": pkl = P + b"Nr" + u32(n) + b"."
elif mode == "binget": pkl = P + b"]q\x00" + b"h\x00" * n + b"."
elif mode == "fanout": pkl = P + b"]q\x00" + (b"(" + b"h\x00" * 1000 + b"t") * n + b"."
elif mode == "fandeep": pkl = P + b"]q\x00(" + b"h\x00" * 1000 + b"tq\x01" + (b"(" + b"h\x01" * 1000 + b"tq\x01") * n + b"."
elif mode == "bigstr": pkl = P + b"X" + u32(0xFFFFFFF0) + b"abc."
elif mode == "longstr": pkl = P + b"X" + u32(n) + b"a" * n + b"."
else: sys.exit("gen.py: mode?")
with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
    z.writestr("archive/data.pkl", pkl)
    z.writestr("archive/byteorder", "little")
    z.writestr("archive/data/0", b"\0" * 4)
PY
mkdir m
pkl() { # pkl MODE N: m/pytorch_model.bin that pickle; mk-fetch and mk-pytorch on it
	python3 gen.py "$1" "$2" m/pytorch_model.bin
}
for mode in none emptylist emptydict emptytuple true shortstr binint; do
	case $mode in shortstr|binint) n=10000000 ;; *) n=16000000 ;; esac
	pkl $mode $n
	refuse "m/pytorch_model.bin: data.pkl builds more than 4096 values for its 0 tensors" mk-fetch --model m -o out
	rss_under 204800 rss "$n '$mode' opcodes"
done
pkl mark 16000000
refuse "m/pytorch_model.bin: data.pkl: MARKs nested more than 64 deep" mk-fetch --model m -o out
for mode in tuple1 list; do
	pkl $mode 1000
	refuse "m/pytorch_model.bin: data.pkl: tuples, lists and dicts nested more than 64 deep" mk-fetch --model m -o out
done
pkl fandeep 100
refuse "m/pytorch_model.bin: data.pkl: tuples, lists and dicts nested more than 64 deep" mk-fetch --model m -o out
pkl fanout 10000
refuse "m/pytorch_model.bin: data.pkl builds more than 1048576 bytes for its 0 tensors" mk-fetch --model m -o out
rss_under 204800 rss "tuples of a list 1000 times over"
pkl memo 4294967280
refuse "m/pytorch_model.bin: data.pkl: a memo index of 4294967280, past the 1 values built" mk-fetch --model m -o out
pkl memo 9999999
refuse "a memo index of 9999999" mk-fetch --model m -o out
rss_under 204800 rss "a memo index of 9999999"
pkl binget 16000000
refuse "m/pytorch_model.bin: data.pkl builds more than 1048576 bytes for its 0 tensors" mk-fetch --model m -o out
rss_under 204800 rss "16 million BINGETs"
pkl bigstr 0
refuse "m/pytorch_model.bin: data.pkl: cut short" mk-fetch --model m -o out
pkl longstr 2000000
refuse "m/pytorch_model.bin: data.pkl builds more than 1048576 bytes" mk-fetch --model m -o out
pkl longstr 70000000
refuse "m/pytorch_model.bin: data.pkl is 70000008 bytes, more than 64 MiB" mk-fetch --model m -o out
rss_under 204800 rss "a data.pkl of 70 MB"
pkl tensors 70000
refuse "m/pytorch_model.bin: data.pkl: more than 65536 tensors" mk-fetch --model m -o out
rss_under 204800 rss "70000 tensors"
# mk-pytorch and mk-yaml say the same, and leave no OUT
printf 'merge_method: linear\nmodels:\n  - model: m/pytorch_model.bin\n    parameters: {weight: 1}\n' > sd.yml
refuse "m/pytorch_model.bin: data.pkl: more than 65536 tensors" mk-pytorch sd.yml out
# a few tensors are read
pkl tensors 3
mk-fetch --model m -o ok.mks
fi

# --- checkpoints with no tensors -------------------------------------------
# a safetensors header of only __metadata__, or of nothing; a .bin whose
# state dict is empty or holds no tensor; a model directory of such
# shards; every model of a merge empty: refused naming the file, no OUT
st_empty() { # st_empty FILE HEADER
	printf '%s' "$2" > hdr
	n=$(wc -c < hdr)
	printf "$(printf '\\%03o' $((n & 255)) $((n >> 8 & 255)) 0 0 0 0 0 0)" > "$1"
	cat hdr >> "$1"
}
st_empty meta.safetensors '{"__metadata__":{"format":"pt"}}'
st_empty none.safetensors '{}'
printf 'merge_method: linear\nmodels:\n  - model: meta.safetensors\n    parameters: {weight: 1}\n  - model: none.safetensors\n    parameters: {weight: 1}\n' > empty.yml
refuse "model 'meta.safetensors': ./meta.safetensors: no tensors" mk-pytorch empty.yml out
err_has "model 'none.safetensors': ./none.safetensors: no tensors" "the second empty model is not named"
refuse "./none.safetensors: no tensors" mk-fetch --model none.safetensors -o out
if command -v python3 >/dev/null 2>&1; then
	python3 - <<'PY'
import zipfile
for name, pkl in (("emptydict.bin", b"\x80\x02}q\x00."), ("ints.bin", b"\x80\x02}q\x00(\x8c\x01aK\x01\x8c\x01bK\x02u.")):
    with zipfile.ZipFile(name, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", "little")
PY
	printf 'merge_method: linear\nmodels:\n  - model: emptydict.bin\n    parameters: {weight: 1}\n' > bin.yml
	refuse "model 'emptydict.bin': ./emptydict.bin: no tensors" mk-pytorch bin.yml out
	refuse "./ints.bin: data.pkl's dict holds 'a', which is not a tensor" mk-fetch --model ints.bin -o out
fi
# a model directory: one shard, or an index that maps nothing
mkdir e1 e2
cp a/config.json e1/ && cp meta.safetensors e1/model.safetensors
cp a/config.json e2/ && cp none.safetensors e2/model-00001-of-00001.safetensors
echo '{"metadata": {}, "weight_map": {}}' > e2/model.safetensors.index.json
slerp_config e.yml e1 a
refuse "model 'e1': e1/model.safetensors: no tensors" mk-yaml e.yml out
refuse "model 'e1': e1/model.safetensors: no tensors" mk-plan e.yml -o out
slerp_config e.yml a e2
refuse "model 'e2': e2/model.safetensors.index.json: no tensors (its weight_map is empty)" mk-yaml e.yml out
# state dicts with no tensor in common, intersected: nothing to merge
cp a/model.safetensors x.safetensors
st_empty y.safetensors '{"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
printf '\0\0\0\0' >> y.safetensors
printf 'merge_method: linear\nmodels:\n  - model: x.safetensors\n    parameters: {weight: 1}\n  - model: y.safetensors\n    parameters: {weight: 1}\n' > xy.yml
refuse "no tensor to merge (no tensor is in every model" mk-pytorch -i xy.yml out
