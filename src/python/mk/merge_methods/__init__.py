"""Merge methods on tensors in memory (mergekit.merge_methods' names):
merge_tensors, merge_state_dicts, groups and method objects."""
import ctypes
import struct

from .._lib import (_DT, _DT_COUNT, _DT_NAME, _BASES, _SCOPES, _TYPES, _Err, _Group, _Pval, _Tensor,
                    _tlib)

__all__ = ["merge_tensors", "merge_state_dicts", "methods", "BatchOptions"]

def methods():
    """The method registry: a dict name -> {pretty_name, reference_url,
    parameters: {name: {scope, type, default, required, doc}}, contract:
    {base, min_inputs, max_inputs, min_non_base, max_non_base}}."""
    lib = _tlib()
    out = {}
    for i in range(lib.mk_method_count()):
        m = lib.mk_method_at(i).contents
        ps = {}
        for k in range(m.nparams):
            p = m.params[k]
            dv = p.default.value()
            ps[p.name.decode()] = {"scope": _SCOPES[p.scope], "type": _TYPES[p.type], "default": dv,
                                   "required": bool(p.flags & 1), "doc": (p.doc or b"").decode()}
        c = m.contract
        out[m.name.decode()] = {
            "pretty_name": (m.pretty_name or b"").decode(), "reference_url": (m.reference_url or b"").decode() or None,
            "parameters": ps, "contract": {"base": _BASES[c.base], "min_inputs": c.min_inputs,
                                           "max_inputs": c.max_inputs, "min_non_base": c.min_non_base,
                                           "max_non_base": c.max_non_base}}
    return out


class BatchOptions:
    """Limits of one batch kernel call: packed input bytes and groups (0 or
    None: no limit).  The results do not depend on them."""

    def __init__(self, max_bytes=None, max_groups=None):
        self.max_bytes, self.max_groups = max_bytes or 0, max_groups or 0


def _np():
    import numpy
    return numpy


def _as_raw(t, dtype):
    """(numpy array of t's bytes, mk dtype name, kind) for a numpy array or
    a torch tensor; dtype (a name) casts a floating input first."""
    np = _np()
    kind = "numpy"
    name = None
    if type(t).__module__.startswith("torch"):
        import torch
        kind = "torch"
        t = t.detach().cpu()
        if dtype and t.is_floating_point():
            t = t.to(getattr(torch, dtype))
        name = str(t.dtype).replace("torch.", "")
        t = t.contiguous()
        if name == "bfloat16":
            arr = t.view(torch.int16).numpy()
        elif name == "bool":
            arr = t.numpy()
        else:
            arr = t.numpy()
    else:
        arr = np.asarray(t)
        if dtype and arr.dtype.kind == "f":
            if dtype == "bfloat16":
                raise TypeError("mk: a bfloat16 cast needs torch tensors (numpy has no bfloat16)")
            arr = arr.astype(dtype)
        name = arr.dtype.name
    if name not in _DT:
        raise TypeError("mk: tensors of dtype %s are not supported" % name)
    arr = np.ascontiguousarray(arr)
    if arr.dtype.byteorder == ">":
        arr = arr.byteswap().view(arr.dtype.newbyteorder("<"))
    return arr, name, kind


def _out(t, kind, np):
    name = _DT_NAME[t.desc.dtype]
    shape = tuple(t.desc.shape[i] for i in range(t.desc.ndim))
    n = 1
    for s in shape:
        n *= s
    npdt = {"bfloat16": "uint16"}.get(name, name)
    itemsize = np.dtype(npdt).itemsize
    buf = (ctypes.c_char * (n * itemsize)).from_address(t.data) if n else b""
    arr = np.frombuffer(bytes(buf), dtype=npdt).reshape(shape)
    if kind == "torch":
        import torch
        r = torch.from_numpy(arr.copy())
        return r.view(torch.bfloat16) if name == "bfloat16" else r
    if name == "bfloat16":
        raise TypeError("mk: a bfloat16 output needs torch tensors (numpy has no bfloat16); "
                        "give out_dtype='float32'")
    return arr


def _pv_set(lib, pv, name, idx, v, what):
    e = _Err()
    if isinstance(v, bool):
        p = _Pval(set=True, type=2, raw=int(v))
    elif isinstance(v, int):
        p = _Pval(set=True, type=1, raw=v)
    elif isinstance(v, float):
        p = _Pval(set=True, type=0, raw=struct.unpack("<q", struct.pack("<d", v))[0])
    else:
        raise TypeError("%s: parameter %s: expected a number or a bool, not %r" % (what, name, v))
    if lib.mk_param_values_set(pv, name.encode(), idx, p, ctypes.byref(e)):
        raise ValueError("%s: %s" % (what, e.msg.decode("utf-8", "replace")))


def _params(lib, parameters, ids, what):
    """Parameter values: a scalar (a global value, or broadcast to every
    input), a sequence (per input, in order) or a mapping id -> value."""
    pv = lib.mk_param_values_new()
    if not pv:
        raise MemoryError()
    try:
        for k, v in (parameters or {}).items():
            if isinstance(v, dict):
                for i, key in enumerate(ids):
                    if key in v:
                        _pv_set(lib, pv, k, i, v[key], what)
                unknown = set(v) - set(ids)
                if unknown:
                    raise ValueError("%s: parameter %s names inputs %s that are not given"
                                     % (what, k, sorted(map(str, unknown))))
            elif isinstance(v, (list, tuple)):
                if len(v) != len(ids):
                    raise ValueError("%s: parameter %s has %d values for %d inputs" % (what, k, len(v), len(ids)))
                for i, x in enumerate(v):
                    _pv_set(lib, pv, k, i, x, what)
            else:
                _pv_set(lib, pv, k, -1, v, what)
    except BaseException:
        lib.mk_param_values_free(pv)
        raise
    return pv


def _dtype_name(dt):
    """A dtype as mk names it: "bfloat16", torch.bfloat16, numpy.float16,
    "torch.float32" ..."""
    if dt is None:
        return None
    if isinstance(dt, str):
        name = dt.replace("torch.", "")
    elif type(dt).__module__.startswith("torch"):
        name = str(dt).replace("torch.", "")
    else:
        try:
            name = _np().dtype(dt).name
        except TypeError:
            name = str(dt)
    if name not in _DT:
        raise TypeError("mk: not a dtype mk merges: %r" % (dt,))
    return name


def _merge_groups(method, groups, parameters_of, dtype, out_dtype, seed, batch_options):
    """groups: [(name, [tensor...], ids, base_index)]; parameters_of(g) the
    parameters of group g.  Returns the outputs in order."""
    np = _np()
    lib = _tlib()
    if isinstance(method, Method):
        method = method.name
    dtype, out_dtype = _dtype_name(dtype), _dtype_name(out_dtype)
    keep, pvs = [], []
    cg = (_Group * max(1, len(groups)))()
    kind = "numpy"
    try:
        for gi, (name, ts, ids, base) in enumerate(groups):
            arrs = []
            ct = (_Tensor * len(ts))()
            for i, t in enumerate(ts):
                arr, dn, k = _as_raw(t, dtype)
                kind = k if k == "torch" else kind
                arrs.append(arr)
                ct[i].desc.dtype = _DT[dn]
                ct[i].desc.ndim = arr.ndim
                for d, s in enumerate(arr.shape):
                    ct[i].desc.shape[d] = s
                ct[i].data = arr.ctypes.data
            keep.append((arrs, ct))
            pv = _params(lib, parameters_of(gi), ids, name or "merge")
            pvs.append(pv)
            cg[gi] = _Group(name=(name or "tensor").encode(), in_=ct, n=len(ts),
                            base=-1 if base is None else base, pv=pv)
        odt = _DT_COUNT if out_dtype is None else _DT[out_dtype]
        bo = batch_options or BatchOptions()
        e = _Err()
        if lib.mk_merge_groups(method.encode(), cg, len(groups), odt, seed, bo.max_bytes, bo.max_groups,
                               ctypes.byref(e)):
            raise ValueError(e.msg.decode("utf-8", "replace"))
        outs = []
        for gi in range(len(groups)):
            outs.append(_out(cg[gi].out, kind, np))
        return outs
    finally:
        for gi in range(len(groups)):
            if cg[gi].out.data:
                lib.mk_tensor_release(ctypes.byref(cg[gi].out))
        for pv in pvs:
            lib.mk_param_values_free(pv)


def merge_tensors(tensors, method, parameters=None, ids=None, base_index=None, name=None, dtype=None,
                  out_dtype=None, seed=0):
    """Merge the inputs of one output tensor (NumPy arrays or torch
    tensors) with a registry method (a name or a Method).  parameters: scalars (global, or
    broadcast), sequences (per input) or mappings id -> value (ids default
    to the input positions).  dtype casts floating inputs first; out_dtype
    the output.  The parameters and the method's input contract are
    checked as the planner checks them; errors raise ValueError."""
    ids = list(ids) if ids is not None else list(range(len(tensors)))
    if len(ids) != len(tensors):
        raise ValueError("merge_tensors: %d ids for %d tensors" % (len(ids), len(tensors)))
    return _merge_groups(method, [(name, list(tensors), ids, base_index)], lambda g: parameters, dtype,
                         out_dtype, seed, None)[0]


def merge_state_dicts(state_dicts, method, parameters=None, base=None, strict=True, dtype=None, out_dtype=None,
                      seed=0, batch_options=None):
    """Merge state dicts {id: {name: tensor}} tensor by tensor.  strict:
    every dict has the same names (else ValueError); otherwise their
    intersection.  Tensors that are not floating must be equal in every
    input and are copied.  base: the id of the base model, or None."""
    np = _np()
    keys = list(state_dicts)
    names = [set(sd) for sd in state_dicts.values()]
    common = set.intersection(*names) if names else set()
    if strict and any(n != common for n in names):
        diff = sorted(set.union(*names) - common)
        raise ValueError("merge_state_dicts: the state dicts' names differ (%s%s); pass strict=False to merge "
                         "their intersection" % (", ".join(diff[:5]), ", ..." if len(diff) > 5 else ""))
    order = [n for n in state_dicts[keys[0]] if n in common]
    base_index = keys.index(base) if base is not None else None
    out, groups = {}, []
    for n in order:
        first, _, _ = _as_raw(state_dicts[keys[0]][n], None)
        if first.dtype.kind not in "f" and not (type(state_dicts[keys[0]][n]).__module__.startswith("torch") and
                                                str(state_dicts[keys[0]][n].dtype) == "torch.bfloat16"):
            for k in keys[1:]:
                other, _, _ = _as_raw(state_dicts[k][n], None)
                if other.shape != first.shape or other.dtype != first.dtype or not np.array_equal(other, first):
                    raise ValueError("merge_state_dicts: %s is not floating and differs between %r and %r"
                                     % (n, keys[0], k))
            out[n] = state_dicts[keys[0]][n]
            continue
        groups.append((n, [state_dicts[k][n] for k in keys], keys, base_index))
    if groups:
        res = _merge_groups(method, groups, lambda g: parameters, dtype, out_dtype, seed, batch_options)
        for (n, _, _, _), r in zip(groups, res):
            out[n] = r
    return {n: out[n] for n in order}



# ---- groups and method objects (mergekit.merge_methods' shapes)

__all__ += ["TensorGroup", "PerGroupValues", "Method", "get"]


class TensorGroup:
    """The inputs of one output tensor: entries (id, tensor) in order, the
    base's position, and metadata (name; vocabulary_axis is recorded, and
    inputs must still agree in shape along it)."""

    def __init__(self, entries, base_index=None, metadata=None):
        self.entries = list(entries)
        self.base_index = base_index
        self.metadata = dict(metadata or {})

    @classmethod
    def from_tensors(cls, tensors, ids=None, base_index=None, name=None, vocabulary_axis=None):
        tensors = list(tensors)
        ids = list(ids) if ids is not None else list(range(len(tensors)))
        if len(ids) != len(tensors):
            raise ValueError("TensorGroup.from_tensors: %d ids for %d tensors" % (len(ids), len(tensors)))
        return cls(zip(ids, tensors), base_index, {"name": name, "vocabulary_axis": vocabulary_axis})

    @property
    def ids(self):
        return [i for i, _ in self.entries]

    @property
    def tensors(self):
        return [t for _, t in self.entries]

    @property
    def name(self):
        return self.metadata.get("name")


class PerGroupValues(list):
    """One parameter value per group (each a scalar, a sequence or a
    mapping id -> value, as for merge_tensors)."""


class Method:
    """A registry method, callable on groups: method(groups, parameters=...,
    batch_options=..., dtype=..., out_dtype=..., seed=...) returns a tuple
    of outputs, one per group, in order."""

    def __init__(self, name):
        info = methods().get(name)
        if info is None:
            raise KeyError("mk: no merge method %r (mk.methods() lists them)" % name)
        self.name = name
        self.info = info

    def __repr__(self):
        return "mk.Method(%r)" % self.name

    def __call__(self, groups, parameters=None, batch_options=None, dtype=None, out_dtype=None, seed=0):
        if isinstance(groups, TensorGroup):
            groups = [groups]
        groups = list(groups)
        parameters = dict(parameters or {})
        for k, v in parameters.items():
            if isinstance(v, PerGroupValues) and len(v) != len(groups):
                raise ValueError("%s: parameter %s has %d per-group values for %d groups"
                                 % (self.name, k, len(v), len(groups)))

        def of(gi):
            return {k: (v[gi] if isinstance(v, PerGroupValues) else v) for k, v in parameters.items()}

        return tuple(_merge_groups(self.name, [(g.name, g.tensors, g.ids, g.base_index) for g in groups], of,
                                   dtype, out_dtype, seed, batch_options))


def get(name):
    """The method object of a registry name."""
    return Method(name)
