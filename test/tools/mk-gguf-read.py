#!/usr/bin/env python3
"""mk-gguf-read.py - print a GGUF file's key-value pairs and tensor infos,
checking its structure on the way (Python standard library only).

  python3 test/tools/mk-gguf-read.py [--full] FILE.gguf

Prints "version 3", one "kv KEY TYPE VALUE" line per pair (arrays as
TYPE[ELEMTYPE,COUNT] and, without --full, their first 8 elements), one
"tensor NAME TYPE [ne0,ne1,...] offset=O bytes=B" line per tensor,
then "alignment A", "data_start D" and "file_size S".  Exits 1 with
"error: ..." on a structural fault: bad magic or version, a truncated
header, an unknown type, a tensor offset not aligned or not where the
previous tensor's padded data ends, data past the end of the file.
"""
import struct
import sys

VTYPES = {0: ("u8", "<B"), 1: ("i8", "<b"), 2: ("u16", "<H"), 3: ("i16", "<h"),
          4: ("u32", "<I"), 5: ("i32", "<i"), 6: ("f32", "<f"), 7: ("bool", "<?"),
          8: ("str", None), 9: ("arr", None), 10: ("u64", "<Q"), 11: ("i64", "<q"),
          12: ("f64", "<d")}

# ggml type id: (name, elements per block, bytes per block)
GTYPES = {0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20),
          6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34), 9: ("q8_1", 32, 36),
          10: ("q2_K", 256, 84), 11: ("q3_K", 256, 110), 12: ("q4_K", 256, 144),
          13: ("q5_K", 256, 176), 14: ("q6_K", 256, 210), 15: ("q8_K", 256, 292),
          16: ("iq2_xxs", 256, 66), 17: ("iq2_xs", 256, 74), 18: ("iq3_xxs", 256, 98),
          19: ("iq1_s", 256, 50), 20: ("iq4_nl", 32, 18), 21: ("iq3_s", 256, 110),
          22: ("iq2_s", 256, 82), 23: ("iq4_xs", 256, 136), 24: ("i8", 1, 1),
          25: ("i16", 1, 2), 26: ("i32", 1, 4), 27: ("i64", 1, 8), 28: ("f64", 1, 8),
          29: ("iq1_m", 256, 56), 30: ("bf16", 1, 2), 34: ("tq1_0", 256, 54),
          35: ("tq2_0", 256, 66), 39: ("mxfp4", 32, 17), 40: ("nvfp4", 64, 36),
          41: ("q1_0", 128, 18), 42: ("q2_0", 64, 18)}


class GGUFError(Exception):
    pass


class Reader:
    def __init__(self, data):
        self.d = data
        self.p = 0

    def take(self, n, what):
        if self.p + n > len(self.d):
            raise GGUFError(f"truncated at byte {self.p}: {what} needs {n} bytes")
        b = self.d[self.p:self.p + n]
        self.p += n
        return b

    def num(self, fmt, what):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what):
        n = self.num("<Q", what + " length")
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError(f"{what} at byte {self.p - n} is not UTF-8")

    def value(self, vt, what):
        if vt not in VTYPES:
            raise GGUFError(f"{what}: unknown value type {vt}")
        name, fmt = VTYPES[vt]
        if name == "str":
            return self.string(what)
        if name == "arr":
            et = self.num("<I", what + " element type")
            n = self.num("<Q", what + " count")
            if et == 9:
                raise GGUFError(f"{what}: nested arrays are not read")
            return (et, [self.value(et, f"{what}[{i}]") for i in range(n)])
        return self.num(fmt, what)


def parse(data):
    r = Reader(data)
    if r.take(4, "magic") != b"GGUF":
        raise GGUFError("not a GGUF file (magic)")
    version = r.num("<I", "version")
    if version != 3:
        raise GGUFError(f"GGUF version {version}, this reads 3")
    n_t = r.num("<Q", "tensor count")
    n_kv = r.num("<Q", "key count")
    kvs = []
    for i in range(n_kv):
        key = r.string(f"key {i}")
        vt = r.num("<I", f"type of {key}")
        kvs.append((key, vt, r.value(vt, key)))
    keys = [k for k, _, _ in kvs]
    if len(set(keys)) != len(keys):
        raise GGUFError("a key appears twice")
    align = 32
    for k, vt, v in kvs:
        if k == "general.alignment":
            if vt != 4 or v == 0 or v & (v - 1):
                raise GGUFError("general.alignment is not a u32 power of two")
            align = v
    tensors = []
    for i in range(n_t):
        name = r.string(f"tensor {i} name")
        nd = r.num("<I", f"{name} dimensions")
        if not 1 <= nd <= 4:
            raise GGUFError(f"tensor {name}: {nd} dimensions")
        ne = [r.num("<Q", f"{name} ne") for _ in range(nd)]
        gt = r.num("<I", f"{name} type")
        off = r.num("<Q", f"{name} offset")
        if gt not in GTYPES:
            raise GGUFError(f"tensor {name}: unknown ggml type {gt}")
        tname, blk, bb = GTYPES[gt]
        if ne[0] % blk:
            raise GGUFError(f"tensor {name}: rows of {ne[0]} are not whole {tname} blocks")
        rows = 1
        for x in ne[1:]:
            rows *= x
        tensors.append((name, tname, ne, off, ne[0] // blk * bb * rows))
    names = [t[0] for t in tensors]
    if len(set(names)) != len(names):
        raise GGUFError("a tensor name appears twice")
    start = (r.p + align - 1) // align * align
    expect = 0
    for name, _, _, off, nb in tensors:
        if off % align:
            raise GGUFError(f"tensor {name}: offset {off} not aligned to {align}")
        if off != expect:
            raise GGUFError(f"tensor {name}: offset {off}, the previous data ends at {expect}")
        expect = off + (nb + align - 1) // align * align
        if start + off + nb > len(data):
            raise GGUFError(f"tensor {name}: data past the end of the file")
    return version, kvs, tensors, align, start


def show(vt, v, full):
    if vt == 9:
        et, items = v
        shown = items if full else items[:8]
        body = ", ".join(show(et, x, full) for x in shown)
        more = "" if len(shown) == len(items) else ", ..."
        return f"[{body}{more}]"
    if vt == 8:
        return repr(v)
    if vt == 7:
        return "true" if v else "false"
    return repr(v)


def tname(vt, v):
    if vt == 9:
        return f"arr[{VTYPES.get(v[0], ('?',))[0]},{len(v[1])}]"
    return VTYPES[vt][0]


def main(argv):
    full = "--full" in argv
    args = [a for a in argv[1:] if a != "--full"]
    if len(args) != 1:
        sys.stderr.write("usage: mk-gguf-read.py [--full] FILE.gguf\n")
        return 2
    with open(args[0], "rb") as f:
        data = f.read()
    try:
        version, kvs, tensors, align, start = parse(data)
    except GGUFError as e:
        sys.stderr.write(f"error: {args[0]}: {e}\n")
        return 1
    out = [f"version {version}"]
    out += [f"kv {k} {tname(vt, v)} {show(vt, v, full)}" for k, vt, v in kvs]
    out += [f"tensor {n} {t} [{','.join(map(str, ne))}] offset={o} bytes={b}"
            for n, t, ne, o, b in tensors]
    out += [f"alignment {align}", f"data_start {start}", f"file_size {len(data)}"]
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
