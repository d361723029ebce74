#!/usr/bin/env python3
"""mk-gen-torchbin - write a model directory's safetensors weights as
PyTorch checkpoints in torch.save's zip format, with Python's standard
library alone (no torch): ARCHIVE/data.pkl, a pickle (protocol 2) of an
OrderedDict of tensors rebuilt by torch._utils._rebuild_tensor_v2 from
persistent storage ids, and ARCHIVE/data/KEY per storage, stored.

  mk-gen-torchbin.py SRC DST [--shards N] [--tie A=B] [--evil GLOBAL]
                     [--deflate] [--legacy] [--offset] [--strided]
                     [--view NAME=KIND] [--expand NAME] [--file NAME]
                     [--protocol N]

DST gets SRC's other files, and pytorch_model.bin (or N shards and
pytorch_model.bin.index.json) instead of the safetensors.  --tie A=B: B
shares A's storage (as tied weights do); --offset: every tensor sits at
storage offset 1 of a storage one element longer; --strided: every
tensor is a view that is not contiguous, the 2-D ones in turn
transposed (the storage holds the transpose, stride (1, rows)), a
column slice of a wider storage at an offset (stride (cols + 3, 1),
offset 2) and every other column (stride (2 cols, 2), offset 1), the
1-D ones every other element (stride (2,), offset 1); the storage's
other elements are 0x7f bytes; --view NAME=KIND: the 2-D tensor NAME
that view (KIND 0 transposed, 1 the column slice, 2 every other
column) whatever --strided does; --expand NAME: the 2-D tensor NAME
becomes its first row repeated, stride (0, 1) (its values change);
--evil GLOBAL (module.name) puts a call of that global in the pickle;
--deflate compresses the storages; --legacy writes a bare pickle (the
pre-zip format's first bytes); --file NAME: one file DST/NAME (such as
model.pt) with every tensor, its top folder NAME's stem as torch.save
names it; --protocol N: the pickle in protocol N (2 by default, as
torch.save writes; 4 and 5 memoize with MEMOIZE, not BINPUT)."""
import collections, json, os, pickle, shutil, struct, sys, types, zipfile

DT = {"F32": ("FloatStorage", 4), "F16": ("HalfStorage", 2), "BF16": ("BFloat16Storage", 2),
      "F64": ("DoubleStorage", 8), "I64": ("LongStorage", 8), "I32": ("IntStorage", 4),
      "U8": ("ByteStorage", 1), "I8": ("CharStorage", 1), "BOOL": ("BoolStorage", 1), "I16": ("ShortStorage", 2)}

# Stand-ins that pickle by reference as torch's names do.
torch = types.ModuleType("torch")
utils = types.ModuleType("torch._utils")
sys.modules["torch"], sys.modules["torch._utils"] = torch, utils
def _rebuild_tensor_v2(*a):
    raise RuntimeError("never called")
_rebuild_tensor_v2.__module__ = "torch._utils"
utils._rebuild_tensor_v2 = _rebuild_tensor_v2
for name, _ in DT.values():
    cls = type(name, (), {"__module__": "torch"})
    setattr(torch, name, cls)


class Storage:
    def __init__(self, kind, key, numel):
        self.kind, self.key, self.numel = kind, key, numel


class Tensor:
    def __init__(self, storage, offset, shape, stride=None):
        self.storage, self.offset, self.shape, self.stride = storage, offset, shape, stride

    def __reduce__(self):
        stride, acc = [], 1
        for d in reversed(self.shape):
            stride.insert(0, acc)
            acc *= d
        stride = self.stride or stride
        return (_rebuild_tensor_v2, (self.storage, self.offset, tuple(self.shape), tuple(stride), False,
                                     collections.OrderedDict()))


class Evil:
    def __init__(self, g):
        mod, _, name = g.rpartition(".")
        m = sys.modules.get(mod) or types.ModuleType(mod)
        sys.modules[mod] = m
        f = lambda *a: None
        f.__module__, f.__qualname__, f.__name__ = mod, name, name
        setattr(m, name, f)
        self.f = f

    def __reduce__(self):
        return (self.f, ("echo pwned",))


class P(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", getattr(torch, obj.kind), obj.key, "cpu", obj.numel)
        return None


def read_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}


def view(data, es, shape, k):
    """A view of kind k of the row-major elements data: (storage bytes,
    offset, stride)."""
    el = [data[i:i + es] for i in range(0, len(data), es)]
    junk = b"\x7f" * es
    if len(shape) == 1:
        st = [junk] * (1 + 2 * len(el))
        st[1::2] = el
        return b"".join(st), 1, (2,)
    r, c = shape
    if k == 0:  # transposed
        return b"".join(el[i * c + j] for j in range(c) for i in range(r)), 0, (1, r)
    if k == 1:  # columns of a wider storage, at an offset
        st = [junk] * (2 + r * (c + 3))
        for i in range(r):
            st[2 + i * (c + 3):2 + i * (c + 3) + c] = el[i * c:(i + 1) * c]
        return b"".join(st), 2, (c + 3, 1)
    st = [junk] * (1 + r * 2 * c)  # every other column
    for i in range(r):
        st[1 + i * 2 * c:1 + (i + 1) * 2 * c:2] = el[i * c:(i + 1) * c]
    return b"".join(st), 1, (2 * c, 2)


def write_bin(path, tensors, ties, opts):
    sd = collections.OrderedDict()
    views = opts.get("views", {})
    blobs = {}
    storages = {}
    # a tied tensor after the one whose storage it shares
    order = [n for n in tensors if n not in ties] + [n for n in tensors if n in ties]
    for name in order:
        dt, shape, data = tensors[name]
        kind, es = DT[dt]
        if name in ties and ties[name] in storages:
            st, off, stride = storages[ties[name]]
        elif name == opts.get("expand"):
            st = Storage(kind, str(len(blobs)), shape[1])
            blobs[st.key], off, stride = data[:shape[1] * es], 0, (0, 1)
        elif name in views or (opts.get("strided") and len(shape) in (1, 2) and len(data)):
            blob, off, stride = view(data, es, shape, views.get(name, len(blobs) % 3))
            st = Storage(kind, str(len(blobs)), len(blob) // es)
            blobs[st.key] = blob
        else:
            off, stride = (1 if opts.get("offset") else 0), None
            st = Storage(kind, str(len(blobs)), len(data) // es + off)
            blobs[st.key] = (b"\0" * es if off else b"") + data
        storages[name] = (st, off, stride)
        sd[name] = Tensor(st, off, shape, stride)
    if opts.get("evil"):
        sd["evil"] = Evil(opts["evil"])
    import io
    buf = io.BytesIO()
    P(buf, protocol=opts.get("protocol", 2)).dump(sd)
    if opts.get("legacy"):
        open(path, "wb").write(buf.getvalue())
        return
    comp = zipfile.ZIP_DEFLATED if opts.get("deflate") else zipfile.ZIP_STORED
    top = opts.get("top", "archive")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(top + "/data.pkl", buf.getvalue())
        z.writestr(top + "/byteorder", "little")
        for k, b in blobs.items():
            z.writestr(top + "/data/" + k, b, compress_type=comp)
        z.writestr(top + "/version", "3\n")


def main():
    args = sys.argv[1:]
    src, dst = args[0], args[1]
    opts, ties, shards = {}, {}, 1
    i = 2
    while i < len(args):
        a = args[i]
        if a == "--shards":
            shards = int(args[i + 1]); i += 1
        elif a == "--protocol":
            opts["protocol"] = int(args[i + 1]); i += 1
        elif a == "--tie":
            x, y = args[i + 1].split("="); ties[y] = x; i += 1
        elif a == "--view":
            x, k = args[i + 1].split("="); opts.setdefault("views", {})[x] = int(k); i += 1
        elif a in ("--evil", "--expand", "--file"):
            opts[a[2:]] = args[i + 1]; i += 1
        else:
            opts[a[2:]] = True
        i += 1
    os.makedirs(dst, exist_ok=True)
    tensors = collections.OrderedDict()
    for f in sorted(os.listdir(src)):
        p = os.path.join(src, f)
        if f.endswith(".safetensors"):
            tensors.update(read_st(p))
        elif f != "model.safetensors.index.json" and os.path.isfile(p):
            shutil.copy(p, os.path.join(dst, f))
    for name in list(ties):
        tensors[name] = tensors[ties[name]]  # the same values, shared
    names = list(tensors)
    if opts.get("file"):
        opts["top"] = os.path.splitext(opts["file"])[0]
        write_bin(os.path.join(dst, opts["file"]), tensors, ties, opts)
        return
    if shards == 1:
        write_bin(os.path.join(dst, "pytorch_model.bin"), tensors, ties, opts)
        return
    wm = {}
    for s in range(shards):
        part = collections.OrderedDict((n, tensors[n]) for n in names[s::shards])
        fn = "pytorch_model-%05d-of-%05d.bin" % (s + 1, shards)
        write_bin(os.path.join(dst, fn), part, ties, opts)
        wm.update({n: fn for n in part})
    json.dump({"metadata": {}, "weight_map": wm}, open(os.path.join(dst, "pytorch_model.bin.index.json"), "w"), indent=2)


main()
