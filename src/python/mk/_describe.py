"""libmk's answers that need no merge (mk/run.h): its version, the
architecture a configuration plans (mk_arch_describe) and the model card
it writes (mk_card_generate).  Their texts come back in a caller's
buffer, asked again when it was too small."""
import ctypes
import json

from ._lib import _Diags, _Err, _RunOpts, _diag_lines, _load
from .errors import ConfigError, MergeError


def _dlib():
    lib = _load()
    if not hasattr(lib, "_mk_describe"):
        lib.mk_version.restype = ctypes.c_char_p
        lib.mk_version.argtypes = []
        lib.mk_arch_describe.argtypes = [ctypes.POINTER(_RunOpts), ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                         ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(_Diags),
                                         ctypes.POINTER(_Err)]
        lib.mk_card_generate.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_char_p,
                                         ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                         ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(_Err)]
        lib._mk_describe = True
    return lib


def libmk_version():
    """The version of the libmk this package loaded."""
    return _dlib().mk_version().decode()


def _text(call, cap):
    """call(buf, cap, byref(len)) until the text fits."""
    n = ctypes.c_size_t(0)
    while True:
        buf = ctypes.create_string_buffer(cap)
        call(buf, cap, ctypes.byref(n))
        if n.value < cap:
            return buf.raw[:n.value].decode("utf-8")
        cap = n.value + 1


def arch_json(text, label, model_config=None, allow_crimes=False):
    """The JSON mk_arch_describe gives for the configuration text (YAML or
    JSON), with the layer counts of model_config (a config.json's text, or
    None: the base model's)."""
    lib = _dlib()
    raw = text.encode()
    o = _RunOpts(text=raw, len=len(raw), label=label.encode(), allow_crimes=bool(allow_crimes))
    mc = model_config.encode() if model_config is not None else None
    state = {}

    def call(buf, cap, n):
        d, e = _Diags(), _Err()
        rc = lib.mk_arch_describe(ctypes.byref(o), mc, len(mc) if mc else 0, buf, cap, n, ctypes.byref(d),
                                  ctypes.byref(e))
        lines = _diag_lines(lib, d)
        lib.mk_diags_free(ctypes.byref(d))
        if rc:
            errs = [x for x in lines if x.startswith("error: ")]
            if errs:
                raise ConfigError("\n".join(errs), lines)
            raise MergeError(e.msg.decode("utf-8", "replace"))
        state["lines"] = lines

    return json.loads(_text(call, 1 << 20))


def card_text(text, label, yaml, name):
    lib = _dlib()
    raw = text.encode()

    def call(buf, cap, n):
        e = _Err()
        if lib.mk_card_generate(raw, len(raw), label.encode(), yaml.encode() if yaml is not None else None,
                                name.encode() if name else None, buf, cap, n, ctypes.byref(e)):
            raise ConfigError(e.msg.decode("utf-8", "replace"), [])

    return _text(call, 1 << 16)
