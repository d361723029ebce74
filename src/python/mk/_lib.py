"""libmk through ctypes: loading the library, the structs of its public
headers laid out field for field, and the diagnostics' lines.  Every other
module of the package reaches libmk through here."""
import ctypes
import ctypes.util
import os
import subprocess
import sys
import struct

_PROGRESS = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t,
                             ctypes.c_size_t)
_WARN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)
# int sink(void *ctx, const char *name, const struct mk_tensor_desc *desc, const void *data, struct mk_err *err)
_SINK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_void_p)


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
        ("sink", _SINK), ("sink_ctx", ctypes.c_void_p), ("unsafe_truncate_embeddings", ctypes.c_bool),
        ("quantize", ctypes.c_char_p),
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


def _blas_kernels(path):
    """OPENBLAS_CORETYPE set as mk's programs set it (mk_blas_kernels_better,
    mk_run_merge(3)) before libmk, and OpenBLAS with it, is loaded here:
    asked of libmk in a child process, since OpenBLAS picks its kernels as
    it loads.  Nothing when the variable is set or libmk is not there."""
    if "OPENBLAS_CORETYPE" in os.environ or not os.path.exists(path):
        return
    code = ("import ctypes, sys; l = ctypes.CDLL(sys.argv[1]); f = l.mk_blas_kernels_better; "
            "f.restype = ctypes.c_char_p; r = f(); print(r.decode() if r else '')")
    try:
        r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return
    core = r.stdout.strip() if r.returncode == 0 else ""
    if core:
        os.environ["OPENBLAS_CORETYPE"] = core


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
            _blas_kernels(c)
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


class _JobDesc(ctypes.Structure):  # struct mk_job_desc
    _fields_ = [("tensor", ctypes.c_char_p), ("seed", ctypes.c_uint64), ("is_embed", ctypes.c_bool),
                ("ninputs", ctypes.c_size_t), ("base", ctypes.c_int), ("in_", ctypes.POINTER(_Desc)),
                ("labels", ctypes.POINTER(ctypes.c_char_p)), ("global_", ctypes.POINTER(_Pval)),
                ("input", ctypes.POINTER(_Pval)), ("elem_base", ctypes.c_uint64), ("spare_pass", ctypes.c_bool)]


class _CallbackCall(ctypes.Structure):  # struct mk_callback_call
    _fields_ = [("d", ctypes.POINTER(_JobDesc)), ("global_", ctypes.POINTER(_Pval)),
                ("input", ctypes.POINTER(_Pval)), ("out", ctypes.POINTER(_Desc)),
                ("in_", ctypes.POINTER(ctypes.c_void_p)), ("result", ctypes.c_void_p),
                ("elem_begin", ctypes.c_uint64)]


# int fn(void *ctx, const struct mk_callback_call *c, struct mk_err *err)
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_CallbackCall), ctypes.POINTER(_Err))
MK_EIO, MK_EINVAL = 1, 4
MK_CALLBACK_PIECES = 0x1


def _cblib():
    lib = _tlib()
    if not hasattr(lib, "_mk_callbacks"):
        lib.mk_method_register_callback.argtypes = [
            ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_ParamSpec), ctypes.c_size_t,
            ctypes.POINTER(_Contract), ctypes.c_uint, _CALLBACK, ctypes.c_void_p, ctypes.POINTER(_Err)]
        lib.mk_method_find.restype = ctypes.c_void_p
        lib.mk_method_find.argtypes = [ctypes.c_char_p]
        lib._mk_callbacks = True
    return lib


_SCOPES = ("global", "per_input", "per_non_base")
_TYPES = ("float", "int", "bool")
_BASES = ("ignored", "optional", "required", "forbidden")
