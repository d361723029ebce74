"""The methods libmk implements (the built-ins and plugins' methods),
called on tensors in memory through mk_merge_groups(3): the same
kernels, parameter checks and bytes as a YAML merge."""
import ctypes
import struct

from .._lib import (_DT, _DT_COUNT, _DT_NAME, _BASES, _SCOPES, _TYPES, _Err, _Group, _Pval, _Tensor,
                    _tlib)
from .base import (MISSING, BasePolicy, BatchOptions, InputContract, MergeMethod, MergeMethodSpec, ParameterScope,
                   ParameterSpec, PerGroupValues, TensorGroup)


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
    if isinstance(method, BuiltinMethod):
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
        max_bytes, max_groups = (batch_options or BatchOptions(None, None)).c_limits()
        e = _Err()
        if lib.mk_merge_groups(method.encode(), cg, len(groups), odt, seed, max_bytes, max_groups,
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



_SCOPE_OF = {"global": ParameterScope.SHARED, "per_input": ParameterScope.INPUT,
             "per_non_base": ParameterScope.NON_BASE}


def _spec_of(name, info):
    params = []
    for pname, p in info["parameters"].items():
        tp = {"float": float, "int": int, "bool": bool}[p["type"]]
        params.append(ParameterSpec(pname, tp, _SCOPE_OF[p["scope"]],
                                    MISSING if p["required"] else p["default"],
                                    p["doc"] or None))
    c = info["contract"]
    big = (1 << 32) - 1
    contract = InputContract(BasePolicy(c["base"]), c["min_inputs"],
                             None if c["max_inputs"] == big else c["max_inputs"],
                             c["min_non_base"] or None, None if c["max_non_base"] == big else c["max_non_base"])
    return MergeMethodSpec(name, params, contract, info["pretty_name"] or None, info["reference_url"])


class BuiltinMethod(MergeMethod):
    """A method of libmk's registry, callable on groups: method(groups,
    parameters=..., batch_options=..., dtype=..., out_dtype=..., seed=...)
    returns a tuple of outputs, one per group, in order.  libmk checks
    the parameters and contracts as a YAML merge's planner does."""

    supports_batching = True

    def __init__(self, name):
        info = methods().get(name)
        if info is None:
            raise KeyError("mk: no merge method %r (mk.methods() lists them)" % name)
        self.info = info
        self.spec = _spec_of(name, info)

    @property
    def name(self):
        return self.spec.name

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

    def _execute(self, groups, parameters, options, input_dtypes, out_dtype):
        raise NotImplementedError("libmk's methods bind their parameters themselves")
