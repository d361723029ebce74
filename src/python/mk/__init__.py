"""mk: model merging for large language models, from Python.

A thin layer over libmk (loaded with ctypes, so nothing is compiled when
the package is installed).  The names follow mergekit's Python API, so code
written for it changes only its imports::

    import mk
    config = mk.MergeConfiguration.model_validate({
        "merge_method": "slerp",
        "base_model": "org/base",
        "models": [{"model": "org/base"}, {"model": "org/tuned"}],
        "parameters": {"t": 0.3},
        "dtype": "bfloat16",
    })
    mk.run_merge(config, "out", options=mk.MergeOptions(copy_tokenizer=True))

The merge runs inside this process (mk_run_merge(3)): the same bytes as
``mk-yaml CONFIG OUT``.  Progress goes to the ``mk`` logger (and to a tqdm
bar when tqdm is installed and ``MergeOptions(quiet=False)``); Ctrl-C
cancels the merge and leaves no output directory.

libmk.so is looked for in $MK_LIB, then beside this package (an installed
tree: PREFIX/lib/libmk.so.0), then by the system's loader.
"""
import ctypes
import ctypes.util
import json
import logging
import os
import struct
import threading
import warnings

__all__ = ["MergeConfiguration", "MergeOptions", "MergeError", "ConfigError", "run_merge", "validate"]

log = logging.getLogger("mk")


class MergeError(RuntimeError):
    """A merge failed: the message says which stage and why."""


class ConfigError(ValueError):
    """A configuration has errors: ``.diagnostics`` lists every one of
    them (errors and warnings) as "label:line:col: path: message" lines,
    and the message holds the errors."""

    def __init__(self, message, diagnostics):
        super().__init__(message)
        self.diagnostics = diagnostics


# ---- libmk through ctypes

_PROGRESS = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t,
                             ctypes.c_size_t)
_WARN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)


class _RunOpts(ctypes.Structure):
    # struct mk_run_opts (mk/run.h), field for field
    _fields_ = [
        ("config", ctypes.c_void_p),
        ("text", ctypes.c_char_p), ("len", ctypes.c_size_t), ("label", ctypes.c_char_p),
        ("config_path", ctypes.c_char_p), ("out_dir", ctypes.c_char_p),
        ("out_shard_size", ctypes.c_uint64), ("no_copy_tokenizer", ctypes.c_bool),
        ("no_model_card", ctypes.c_bool), ("allow_crimes", ctypes.c_bool), ("seed", ctypes.c_uint64),
        ("cuda", ctypes.c_bool), ("threads", ctypes.c_uint), ("max_memory", ctypes.c_uint64),
        ("spill_dir", ctypes.c_char_p), ("force", ctypes.c_bool), ("resume", ctypes.c_bool),
        ("strict", ctypes.c_bool), ("remote", ctypes.c_bool), ("no_cache", ctypes.c_bool),
        ("has_lora_dtype", ctypes.c_bool), ("lora_dtype", ctypes.c_int),
        ("progress", _PROGRESS), ("progress_ctx", ctypes.c_void_p),
        ("cancel", ctypes.POINTER(ctypes.c_int)), ("keep_partial_on_cancel", ctypes.c_bool),
        ("warn", _WARN), ("warn_ctx", ctypes.c_void_p), ("buffered", ctypes.c_bool),
        ("stats", ctypes.c_void_p),   # struct mk_run_stats *: not kept here (NULL)
    ]


class _Diag(ctypes.Structure):
    _fields_ = [("level", ctypes.c_int), ("line", ctypes.c_uint), ("col", ctypes.c_uint),
                ("path", ctypes.c_char_p), ("msg", ctypes.c_char_p)]


class _Diags(ctypes.Structure):
    _fields_ = [("label", ctypes.c_char_p), ("n", ctypes.c_size_t), ("nerrors", ctypes.c_size_t),
                ("nwarnings", ctypes.c_size_t), ("v", ctypes.POINTER(_Diag))]


class _Err(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


_lib = None


def _load():
    global _lib
    if _lib is not None:
        return _lib
    here = os.path.dirname(os.path.abspath(__file__))
    cands = [os.environ.get("MK_LIB")]
    # an installed tree: PREFIX/lib/pythonX.Y/site-packages/mk -> PREFIX/lib
    d = here
    for _ in range(4):
        d = os.path.dirname(d)
        cands.append(os.path.join(d, "libmk.so.0"))
    cands += ["libmk.so.0", ctypes.util.find_library("mk")]
    errors = []
    for c in cands:
        if not c:
            continue
        try:
            lib = ctypes.CDLL(c)
            break
        except OSError as e:
            errors.append(str(e))
    else:
        raise ImportError("mk: cannot load libmk.so (set MK_LIB to its path, or install mk): " +
                          "; ".join(errors[:3]))
    lib.mk_run_opts_size.restype = ctypes.c_size_t
    if lib.mk_run_opts_size() != ctypes.sizeof(_RunOpts):
        raise ImportError("mk: this package's struct mk_run_opts (%d bytes) is not the library's (%d): "
                          "use the package of the same mk" % (ctypes.sizeof(_RunOpts), lib.mk_run_opts_size()))
    lib.mk_run_merge.argtypes = [ctypes.POINTER(_RunOpts), ctypes.POINTER(_Diags), ctypes.POINTER(_Err)]
    lib.mk_validate_config.argtypes = lib.mk_run_merge.argtypes
    lib.mk_diags_free.argtypes = [ctypes.POINTER(_Diags)]
    lib.mk_diag_format.argtypes = [ctypes.POINTER(_Diags), ctypes.POINTER(_Diag), ctypes.c_char_p, ctypes.c_size_t]
    lib.mk_config_dtype_parse.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_void_p,
                                          ctypes.c_void_p]
    _lib = lib
    return lib


def _diag_lines(lib, d):
    out = []
    buf = ctypes.create_string_buffer(4096)
    for i in range(d.n):
        lib.mk_diag_format(ctypes.byref(d), ctypes.byref(d.v[i]), buf, len(buf))
        out.append(("error: " if d.v[i].level == 0 else "warning: ") + buf.value.decode("utf-8", "replace"))
    return out


# ---- the configuration

class MergeConfiguration:
    """A merge configuration, validated by mk's planner (the models are
    opened, architectures and parameters checked) when it is made."""

    def __init__(self, text, label="config"):
        self._text = text
        self._label = label
        self.warnings = []

    @classmethod
    def model_validate(cls, obj):
        """From a dict as mergekit's YAML would load (or another
        MergeConfiguration).  Raises ConfigError with every diagnostic."""
        if isinstance(obj, MergeConfiguration):
            return obj
        if not isinstance(obj, dict):
            raise TypeError("MergeConfiguration.model_validate: expected a dict, not %s" % type(obj).__name__)
        # JSON is YAML: the planner reads it as the file would be read
        self = cls(json.dumps(obj, indent=1), "config")
        self._validate()
        return self

    @classmethod
    def from_yaml(cls, text, label="config.yml"):
        """From YAML text."""
        self = cls(text, label)
        self._validate()
        return self

    def to_yaml(self):
        return self._text

    def _validate(self):
        lines = validate(self)
        self.warnings = [x for x in lines if x.startswith("warning: ")]
        for w in self.warnings:
            log.warning("%s", w[len("warning: "):])


def validate(config):
    """Every diagnostic of a configuration (a MergeConfiguration, a dict or
    YAML text) as lines; raises ConfigError when there are errors."""
    if isinstance(config, dict):
        config = MergeConfiguration(json.dumps(config, indent=1))
    elif isinstance(config, str):
        config = MergeConfiguration(config, "config.yml")
    lib = _load()
    raw = config._text.encode()
    o = _RunOpts(text=raw, len=len(raw), label=config._label.encode())
    d, e = _Diags(), _Err()
    rc = lib.mk_validate_config(ctypes.byref(o), ctypes.byref(d), ctypes.byref(e))
    lines = _diag_lines(lib, d)
    lib.mk_diags_free(ctypes.byref(d))
    if rc:
        errs = [x for x in lines if x.startswith("error: ")]
        raise ConfigError("\n".join(errs) if errs else e.msg.decode("utf-8", "replace"), lines)
    return lines


# ---- options

class MergeOptions:
    """mergekit's MergeOptions names that mean something to mk; any other
    is accepted with a warning (it changes nothing)."""

    _KNOWN = {
        "cuda": False, "random_seed": None, "out_shard_size": None, "copy_tokenizer": True,
        "write_model_card": True, "allow_crimes": False, "max_memory": None, "num_threads": None,
        "spill": None, "force": False, "resume": False, "strict": False, "remote": False,
        "no_cache": False, "lora_merge_dtype": None, "transformers_cache": None, "quiet": False,
        # mk's: called as progress_callback(bytes_done, bytes_total,
        # tensors_done, ntensors) from the merge's thread; cancel_event (a
        # threading.Event) set from anywhere stops the merge, no output
        "progress_callback": None, "cancel_event": None,
        # mk's: write the output through the page cache, not O_DIRECT
        "buffered": False,
    }
    # mergekit's own, meaningless to mk
    _IGNORED = {"lazy_unpickle", "low_cpu_memory", "clone_tensors", "trust_remote_code", "read_to_gpu",
                "multi_gpu", "gpu_rich", "async_write", "safe_serialization", "write_threads", "device",
                "lora_merge_cache", "verbose"}

    def __init__(self, **kw):
        for k, v in self._KNOWN.items():
            setattr(self, k, v)
        for k, v in kw.items():
            if k in self._KNOWN:
                setattr(self, k, v)
            elif k in self._IGNORED:
                log.info("MergeOptions: %s means nothing to mk; ignored", k)
            else:
                warnings.warn("MergeOptions: unknown option %r ignored" % k, stacklevel=2)


def _size(v):
    if v is None:
        return 0
    if isinstance(v, int):
        return v
    s = str(v).strip()
    units = {"k": 1000, "m": 1000 ** 2, "g": 1000 ** 3, "t": 1000 ** 4, "b": 1000 ** 3,
             "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
    num = s.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    unit = s[len(num):].lower()
    if unit not in units and unit:
        raise ValueError("not a size: %r" % v)
    return int(float(num) * units.get(unit, 1))


def run_merge(merge_config, out_path, options=None, config_source=None):
    """Run the merge into out_path (mergekit's run_merge).  Raises
    ConfigError for a bad configuration, MergeError when the merge fails,
    KeyboardInterrupt after a Ctrl-C (the merge cancelled, no output)."""
    config = MergeConfiguration.model_validate(merge_config) if isinstance(merge_config, dict) else merge_config
    opt = options or MergeOptions()
    lib = _load()
    if opt.transformers_cache:
        os.environ["HF_HUB_CACHE"] = str(opt.transformers_cache)
    raw = config._text.encode()
    cancel = ctypes.c_int(0)
    bar = None
    if not opt.quiet:
        try:
            import tqdm
            bar = tqdm.tqdm(unit="B", unit_scale=True, desc="mk")
        except ImportError:
            bar = None
    last = [0]

    def on_progress(ctx, done, total, tdone, ntensors):
        log.debug("%d/%d bytes, %d/%d tensors", done, total, tdone, ntensors)
        if opt.progress_callback is not None:
            opt.progress_callback(done, total, tdone, ntensors)
        if opt.cancel_event is not None and opt.cancel_event.is_set():
            cancel.value = 1
        if bar is not None:
            bar.total = total
            bar.update(done - last[0])
        last[0] = done

    cb = _PROGRESS(on_progress)
    # the stages' warnings (an output that became NaN or infinite, ...)
    wcb = _WARN(lambda ctx, msg: log.warning("%s", msg.decode("utf-8", "replace")))
    o = _RunOpts(text=raw, len=len(raw), label=config._label.encode(), out_dir=os.fsencode(out_path),
                 out_shard_size=_size(opt.out_shard_size), no_copy_tokenizer=not opt.copy_tokenizer,
                 no_model_card=not opt.write_model_card, allow_crimes=bool(opt.allow_crimes),
                 seed=int(opt.random_seed or 0), cuda=bool(opt.cuda), threads=int(opt.num_threads or 0),
                 max_memory=_size(opt.max_memory),
                 spill_dir=os.fsencode(opt.spill) if opt.spill else None, force=bool(opt.force),
                 resume=bool(opt.resume), strict=bool(opt.strict), remote=bool(opt.remote),
                 no_cache=bool(opt.no_cache), progress=cb, cancel=ctypes.pointer(cancel), warn=wcb,
                 buffered=bool(opt.buffered))
    if opt.lora_merge_dtype:
        dt = ctypes.c_int()
        if lib.mk_config_dtype_parse(str(opt.lora_merge_dtype).encode(), ctypes.byref(dt), None, None):
            raise ValueError("lora_merge_dtype: not a dtype: %r" % opt.lora_merge_dtype)
        o.has_lora_dtype, o.lora_dtype = True, dt.value
    d, e = _Diags(), _Err()
    result = {}

    ended = threading.Event()

    def work():  # ctypes lets go of the GIL: the main thread stays free for Ctrl-C
        try:
            result["rc"] = lib.mk_run_merge(ctypes.byref(o), ctypes.byref(d), ctypes.byref(e))
        finally:
            ended.set()

    t = threading.Thread(target=work, name="mk_run_merge")
    t.start()
    interrupted = False
    # a Ctrl-C may come at any line: the merge is waited for until it ends
    # (on an Event: a join interrupted by KeyboardInterrupt can report a
    # thread still running as stopped)
    while True:
        try:
            while not ended.wait(0.1):
                if opt.cancel_event is not None and opt.cancel_event.is_set():
                    cancel.value = 1
            break
        except KeyboardInterrupt:
            cancel.value = 1
            interrupted = True
    t.join()
    if bar is not None:
        bar.close()
    lines = _diag_lines(lib, d)
    lib.mk_diags_free(ctypes.byref(d))
    if interrupted:
        raise KeyboardInterrupt("mk: the merge was cancelled; %s was not written" % out_path)
    if cancel.value and result["rc"]:
        raise MergeError("cancelled: %s was not written" % out_path)
    if result["rc"]:
        errs = [x for x in lines if x.startswith("error: ")]
        if errs:
            raise ConfigError("\n".join(errs), lines)
        raise MergeError(e.msg.decode("utf-8", "replace"))
    log.info("wrote %s", out_path)


# ---- tensors in memory: merge_tensors, merge_state_dicts, methods

__all__ += ["merge_tensors", "merge_state_dicts", "methods", "BatchOptions"]

_DT = {"bool": 0, "uint8": 4, "int8": 5, "int16": 11, "uint16": 12, "float16": 13, "bfloat16": 14,
       "int32": 15, "uint32": 16, "float32": 17, "float64": 19, "int64": 20, "uint64": 21}
_DT_NAME = {v: k for k, v in _DT.items()}
_DT_COUNT = 22
_FLOATS = {"float16", "bfloat16", "float32", "float64"}


class _Desc(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("ndim", ctypes.c_uint), ("shape", ctypes.c_uint64 * 8)]


class _Tensor(ctypes.Structure):
    _fields_ = [("desc", _Desc), ("data", ctypes.c_void_p)]


class _Pval(ctypes.Structure):
    # struct mk_pval; its union is an 8-byte integer here (ctypes cannot
    # pass a union by value; the C union is passed as an integer too)
    _fields_ = [("set", ctypes.c_bool), ("type", ctypes.c_int), ("raw", ctypes.c_int64)]

    def value(self):
        if not self.set:
            return None
        if self.type == 0:
            return struct.unpack("<d", struct.pack("<q", self.raw))[0]
        return self.raw if self.type == 1 else bool(self.raw & 0xFF)


class _ParamSpec(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("scope", ctypes.c_int), ("type", ctypes.c_int),
                ("flags", ctypes.c_uint), ("default", _Pval), ("min", ctypes.c_double), ("max", ctypes.c_double),
                ("doc", ctypes.c_char_p)]


class _Contract(ctypes.Structure):
    _fields_ = [("base", ctypes.c_int), ("min_inputs", ctypes.c_uint32), ("max_inputs", ctypes.c_uint32),
                ("min_non_base", ctypes.c_uint32), ("max_non_base", ctypes.c_uint32)]


class _Method(ctypes.Structure):  # the leading fields of struct mk_method
    _fields_ = [("abi", ctypes.c_uint32), ("name", ctypes.c_char_p), ("pretty_name", ctypes.c_char_p),
                ("reference_url", ctypes.c_char_p), ("params", ctypes.POINTER(_ParamSpec)),
                ("nparams", ctypes.c_size_t), ("contract", _Contract)]


class _Group(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("in_", ctypes.POINTER(_Tensor)), ("n", ctypes.c_size_t),
                ("base", ctypes.c_int), ("pv", ctypes.c_void_p), ("out", _Tensor)]


def _tlib():
    lib = _load()
    if not hasattr(lib, "_mk_tensors"):
        lib.mk_param_values_new.restype = ctypes.c_void_p
        lib.mk_param_values_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, _Pval,
                                            ctypes.POINTER(_Err)]
        lib.mk_param_values_free.argtypes = [ctypes.c_void_p]
        lib.mk_merge_groups.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Group), ctypes.c_size_t, ctypes.c_int,
                                        ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.POINTER(_Err)]
        lib.mk_tensor_release.argtypes = [ctypes.POINTER(_Tensor)]
        lib.mk_method_count.restype = ctypes.c_size_t
        lib.mk_method_at.restype = ctypes.POINTER(_Method)
        lib.mk_method_at.argtypes = [ctypes.c_size_t]
        lib._mk_tensors = True
    return lib


_SCOPES = ("global", "per_input", "per_non_base")
_TYPES = ("float", "int", "bool")
_BASES = ("ignored", "optional", "required", "forbidden")


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
