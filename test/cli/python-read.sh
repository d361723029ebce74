# The reference implementation (Python safetensors) reads mk-pack's output
# back to the input's exact tensors, and writes the very same shard bytes
# for the same tensors.  Skipped when the package is not installed.
. "$MK_TOP/test/cli/lib.inc"
python3 -c 'import safetensors' 2>/dev/null || exit 77
mk-gen-model --shards 2 --all-dtypes --big-rows 9000 --seed 11 m
mk-fetch --model m --chunk-size 64K | mk-pack --out-shard-size 300K out
python3 - m out <<'PY'
import json, os, sys
import ctypes
from safetensors import deserialize, serialize
from safetensors._safetensors_rust import TensorSpec
NAMES = {"BOOL": "bool", "I8": "int8", "U8": "uint8", "I16": "int16", "U16": "uint16",
         "I32": "int32", "U32": "uint32", "I64": "int64", "U64": "uint64", "F16": "float16",
         "F32": "float32", "F64": "float64", "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn",
         "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2": "float8_e5m2",
         "F8_E5M2FNUZ": "float8_e5m2fnuz", "F8_E8M0": "float8_e8m0fnu", "C64": "complex64"}
checked = 0
def reserialize(tensors):
    """The reference writer's bytes for these tensors (None if it lacks a dtype)."""
    keep, specs = [], {}
    for name, t in tensors:
        if t["dtype"] not in NAMES:
            return None
        buf = ctypes.create_string_buffer(bytes(t["data"]), max(1, len(t["data"])))
        keep.append(buf)
        specs[name] = TensorSpec(dtype=NAMES[t["dtype"]], shape=t["shape"],
                                 data_ptr=ctypes.addressof(buf), data_len=len(t["data"]))
    return bytes(serialize(specs, metadata={"format": "pt"}))
def load(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    out = {}
    for f in files:
        raw = open(os.path.join(d, f), "rb").read()
        for name, t in deserialize(raw):
            assert name not in out, name
            out[name] = (t["dtype"], list(t["shape"]), bytes(t["data"]))
        # the reference writer, given these tensors, produces these bytes
        again = reserialize(deserialize(raw))
        if again is not None:
            assert again == raw, f"{f}: mk's bytes differ from the reference writer's"
            global checked
            checked += 1
    return out, files
a, _ = load(sys.argv[1])
b, files = load(sys.argv[2])
assert a.keys() == b.keys(), set(a) ^ set(b)
for k in a:
    assert a[k] == b[k], k
idx = json.load(open(os.path.join(sys.argv[2], "model.safetensors.index.json")))
assert idx["metadata"]["total_size"] == sum(len(v[2]) for v in b.values())
assert set(idx["weight_map"].values()) == set(files) and len(files) > 1
assert checked >= 2, f"only {checked} shards had dtypes the reference writer takes"
print(f"{len(a)} tensors identical in {len(files)} shards; {checked} files byte-identical to the reference writer's")
PY
# without sub-byte dtypes, which the reference writer takes in another
# form, every output shard must be byte-identical to the reference's
mk-gen-model --dtype F16 --big-rows 300 --seed 12 q
mk-fetch --model q | mk-pack --out-shard-size 50K qout
python3 - qout <<'PY'
import ctypes, glob, sys
from safetensors import deserialize, serialize
from safetensors._safetensors_rust import TensorSpec
names = {"F16": "float16", "F32": "float32"}
files = sorted(glob.glob(sys.argv[1] + "/*.safetensors"))
assert len(files) > 3, files
for f in files:
    raw = open(f, "rb").read()
    keep, specs = [], {}
    for n, t in deserialize(raw):
        b = ctypes.create_string_buffer(bytes(t["data"]), len(t["data"]))
        keep.append(b)
        specs[n] = TensorSpec(dtype=names[t["dtype"]], shape=t["shape"], data_ptr=ctypes.addressof(b), data_len=len(t["data"]))
    assert bytes(serialize(specs, metadata={"format": "pt"})) == raw, f
print(f"{len(files)} shards byte-identical to the reference writer's")
PY
