"""Methods written in Python, registered in libmk (mk_method_register_callback(3))
so that a YAML configuration run in this process (run_merge) can name
them: libmk's planner resolves their parameters (gradients, filters, per
slice and per model values) and checks their contracts as for its own
methods; its merge threads gather each output's inputs whole and call the
kernel here, holding the GIL only for that call (an elementwise method's
kernel is called on each chunk instead, as a 1-D tensor).

A kernel sees its inputs as a YAML merge with mergekit would give them:
converted to the dtype the merge reads them as (the configuration's
dtype), with ids that are the configured model references (ModelReference
objects), in mergekit's order (the configuration's models in order, a base
not among them last; mergekit's older form: the base first)."""
import ctypes
import threading

from .. import _lib as L
from . import _arrays as A
from ._values import bounds, strip_annotated
from .base import BasePolicy, ParameterScope, PerInputValues, TensorEntry, TensorGroup, TensorMetadata

_SCOPE = {ParameterScope.SHARED: 0, ParameterScope.INPUT: 1, ParameterScope.NON_BASE: 2}
_TYPE = {float: 0, int: 1, bool: 2}
_BASE = {BasePolicy.IGNORED: 0, BasePolicy.OPTIONAL: 1, BasePolicy.REQUIRED: 2, BasePolicy.FORBIDDEN: 3}
_ANY = (1 << 32) - 1
_FLOAT_NAMES = {13: "float16", 14: "bfloat16", 17: "float32", 19: "float64"}

_keep = []              # the callbacks and specs libmk holds, for the process's life
_lock = threading.Lock()
_errors = []            # the failed kernels' exceptions (run_merge re-raises the first)
_order = {"refs": None}  # the running merge's model order (set_model_order)


def _pval(v, t):
    if v is None:
        return L._Pval(set=False)
    if t == 2:
        return L._Pval(set=True, type=2, raw=int(bool(v)))
    if t == 1:
        return L._Pval(set=True, type=1, raw=int(v))
    import struct
    return L._Pval(set=True, type=0, raw=struct.unpack("<q", struct.pack("<d", float(v)))[0])


def _c_params(spec):
    """libmk's specs of the parameters libmk can carry (bool, int, float);
    the others (strings, tuples ...) keep their defaults in YAML merges."""
    out, index = [], {}
    for p in spec.parameters:
        base, meta = strip_annotated(p.value_type)
        t = _TYPE.get(base)
        if t is None:
            continue
        flags, lo, hi = 0, 0.0, 0.0
        if p.required:
            flags |= 0x01
        b = bounds(meta)
        for k, v in b.items():
            if k in ("ge", "gt"):
                flags |= 0x02 | (0x04 if k == "gt" else 0)
                lo = float(v)
            else:
                flags |= 0x08 | (0x10 if k == "lt" else 0)
                hi = float(v)
        if p.batch_tensor:
            flags |= 0x20
        index[p.name] = len(out)
        out.append(L._ParamSpec(name=p.name.encode(), scope=_SCOPE[p.scope], type=t, flags=flags,
                                default=_pval(None if p.required else p.default, t), min=lo, max=hi,
                                doc=(p.description or "").encode()))
    return out, index


def register(method):
    """Register a Python method in libmk's registry."""
    lib = L._cblib()
    spec = method.spec
    params, index = _c_params(spec)
    arr = (L._ParamSpec * max(1, len(params)))(*params)
    c = spec.contract
    contract = L._Contract(base=_BASE[c.base], min_inputs=c.min_inputs or 0,
                           max_inputs=_ANY if c.max_inputs is None else c.max_inputs,
                           min_non_base=c.min_non_base or 0,
                           max_non_base=_ANY if c.max_non_base is None else c.max_non_base)

    def kernel(ctx, callp, errp):
        try:
            _call(method, index, callp.contents)
            return 0
        except BaseException as e:   # (a KeyboardInterrupt too: the merge stops)
            _errors.append(e)
            msg = ("%s: %s: %s" % (spec.name, type(e).__name__, e)).encode("utf-8", "replace")[:1000]
            errp.contents.code = L.MK_EIO
            errp.contents.msg = msg
            return -L.MK_EIO

    cb = L._CALLBACK(kernel)
    e = L._Err()
    rc = lib.mk_method_register_callback(spec.name.encode(), (spec.pretty_name or spec.name).encode(),
                                         spec.reference_url.encode() if spec.reference_url else None, arr,
                                         len(params), ctypes.byref(contract),
                                         L.MK_CALLBACK_PIECES if spec.elementwise else 0, cb, None,
                                         ctypes.byref(e))
    if rc:
        raise ValueError("merge method %s: %s" % (spec.name, e.msg.decode("utf-8", "replace")))
    with _lock:
        _keep.append((cb, arr, method))


def set_model_order(refs):
    """The running configuration's model references in order (run_merge)."""
    _order["refs"] = list(refs) if refs is not None else None


def take_error():
    """The exception a kernel raised in the merge that just failed, or None."""
    first = _errors[0] if _errors else None
    _errors.clear()
    return first


def _array(ptr, desc, kind):
    np = A.np()
    shape = tuple(int(desc.shape[i]) for i in range(desc.ndim))
    n = 1
    for s in shape:
        n *= s
    ct = ctypes.c_double if desc.dtype == 19 else ctypes.c_float
    a = np.ctypeslib.as_array((ct * max(1, n)).from_address(ptr))[:n].reshape(shape)
    return A.to_kind(a, kind)


_refs = {}


def _ref(label):
    """A model reference as the entries' id (mergekit's ModelReference)."""
    r = _refs.get(label)
    if r is None:
        from ..common import ModelReference
        try:
            r = ModelReference.parse(label)
        except (ValueError, TypeError):
            r = label
        _refs[label] = r
    return r


def _mergekit_order(labels, base):
    """Input indices in mergekit's order: the configuration's models in
    order, a base that is not among them last."""
    refs = _order["refs"]
    n = len(labels)
    if refs is None:
        return [i for i in range(n) if i != base] + ([base] if base >= 0 else [])
    pos = {r: k for k, r in enumerate(refs)}
    return sorted(range(n), key=lambda i: (pos.get(labels[i], len(refs) + (1 if i == base else 0)), i))


def _call(method, index, c):
    d = c.d.contents
    n = d.ninputs
    nparams = len(index)
    kind = method.kind or ("torch" if A.torch_or_none() is not None else "numpy")
    labels = [d.labels[i].decode() if d.labels and d.labels[i] else str(i) for i in range(n)]
    ids = [_ref(x) for x in labels]
    base = d.base
    from .easy_define import LegacyMergeMethod
    order = list(range(n)) if isinstance(method, LegacyMergeMethod) else _mergekit_order(labels, base)
    entries = []
    for i in order:
        t = _array(c.in_[i], c.out.contents, kind)
        want = _FLOAT_NAMES.get(d.in_[i].dtype)
        if want and not (kind == "numpy" and want == "bfloat16"):
            t = A.cast(t, want)    # the dtype the merge reads this input as (exact)
        entries.append(TensorEntry(ids[i], t, i == base))
    group = TensorGroup(entries, TensorMetadata(d.tensor.decode(), 0 if d.is_embed else None))
    bound = {}
    for p in method.spec.parameters:
        k = index.get(p.name)
        if p.scope == ParameterScope.SHARED:
            bound[p.name] = p.default if k is None else c.global_[k].value()
            if k is None and p.required:
                raise TypeError("parameter %s (%s) cannot be given in a YAML configuration; give it a default"
                                % (p.name, p.value_type))
            continue
        ents = group.entries if p.scope == ParameterScope.INPUT else group.non_base
        vals = []
        for e in ents:
            i = ids.index(e.id)
            vals.append(p.default if k is None else c.input[i * nparams + k].value())
        bound[p.name] = PerInputValues([(e.id, p.validate(v)) for e, v in zip(ents, vals)])
    for p in method.spec.parameters:   # libmk checked the numbers; the rest as Python does
        if p.scope == ParameterScope.SHARED:
            bound[p.name] = p.validate(bound[p.name])
    (r,) = method._execute_resolved((group,), [bound])
    out = _array(c.result, c.out.contents, "numpy")
    if A.kind_of(r) == "torch":
        r = r.detach().to(device="cpu", dtype=A.dtype_of(str(out.dtype), "torch")).numpy()
    A.np().copyto(out, r, casting="unsafe")
