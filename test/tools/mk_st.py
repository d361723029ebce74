"""mk_st.py - the safetensors files of a model directory read with
Python's standard library alone, for the test checkers beside it
(mk-fp8-check.py, mk-fp8-experts-check.py, mk-mxfp4-check.py)."""
import json
import os
import struct


def load(d):
    """Every tensor of directory d's *.safetensors files: name ->
    (dtype, shape, the raw bytes)."""
    out = {}
    for f in sorted(x for x in os.listdir(d) if x.endswith(".safetensors")):
        with open(os.path.join(d, f), "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            hdr = json.loads(fh.read(n))
            data = fh.read()
        for k, v in hdr.items():
            if k != "__metadata__":
                a, b = v["data_offsets"]
                out[k] = (v["dtype"], v["shape"], data[a:b])
    return out
