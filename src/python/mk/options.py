"""Merge options (mergekit.options' names): MergeOptions.

MergeOptions takes every field of mergekit's MergeOptions, with its
default and its rules (gpu_rich sets cuda, low_cpu_memory, read_to_gpu and
multi_gpu; device follows cuda when unset and "auto" is resolved;
out_shard_size takes "5B"-style sizes), and mk's own.  Like mergekit's it
is frozen: model_copy(update=...) makes a changed one.  The mergekit
fields that mean nothing to mk (IGNORED_FIELDS) are accepted and logged at
debug level; a name neither knows is warned about (a typo).
"""
import logging
import os
import sys
import warnings

log = logging.getLogger("mk")

__all__ = ["MergeOptions", "IGNORED_FIELDS", "MK_FIELDS", "parse_kmb"]

_BOOL, _INT, _STR, _SIZE, _ANY = "bool", "int", "str", "size", "any"

# mergekit's fields in its order: (name, type, default, optional)
_MERGEKIT = (
    ("allow_crimes", _BOOL, False, False),
    ("unsafe_truncate_embeddings", _BOOL, False, False),
    ("transformers_cache", _STR, None, True),
    ("lora_merge_cache", _STR, None, True),
    ("lora_merge_dtype", _STR, None, True),
    ("cuda", _BOOL, False, False),
    ("device", _STR, None, True),
    ("low_cpu_memory", _BOOL, False, False),
    ("out_shard_size", _SIZE, 5 * 1000 ** 3, False),
    ("copy_tokenizer", _BOOL, True, False),
    ("clone_tensors", _BOOL, False, False),
    ("trust_remote_code", _BOOL, False, False),
    ("random_seed", _INT, None, True),
    ("lazy_unpickle", _BOOL, False, False),
    ("write_model_card", _BOOL, True, False),
    ("safe_serialization", _BOOL, True, False),
    ("verbosity", _INT, 0, False),
    ("quiet", _BOOL, False, False),
    ("read_to_gpu", _BOOL, False, False),
    ("multi_gpu", _BOOL, False, False),
    ("num_threads", _INT, None, True),
    ("gpu_rich", _BOOL, False, False),
    ("async_write", _BOOL, False, False),
    ("write_threads", _INT, 1, False),
)

# mk's own
_MK = (
    ("max_memory", _SIZE, None, True),   # the merge's memory budget
    ("spill", _STR, None, True),         # a directory for jobs over the budget
    ("force", _BOOL, False, False),      # replace an existing output
    ("resume", _BOOL, False, False),     # continue OUT.mk-partial
    ("strict", _BOOL, False, False),     # fail on outputs that became non-finite
    ("remote", _BOOL, False, False),     # read Hub shards by range requests
    ("no_cache", _BOOL, False, False),   # with remote: keep nothing on disk
    # called as progress_callback(bytes_done, bytes_total, tensors_done,
    # ntensors) from the merge's thread
    ("progress_callback", _ANY, None, True),
    # a threading.Event: set from anywhere, it stops the merge (no output)
    ("cancel_event", _ANY, None, True),
    ("buffered", _BOOL, False, False),   # write through the page cache, not O_DIRECT
    # "fp8" or "mxfp4": the weights the base model (else the first) stored
    # in that format written so again (mk-pack --quantize)
    ("quantize", _STR, None, True),
)

# mergekit's fields that change nothing in mk, and why
IGNORED_FIELDS = {
    "lora_merge_cache": "mk applies a LoRA adapter to the weights as it reads them; no merged copy is stored",
    "device": "\"cuda\" is cuda (one GPU, the first), as cuda and gpu_rich are; mk's GPU and CPU results "
              "are the same bits",
    "low_cpu_memory": "mk streams tensors through bounded buffers; nothing is held on an accelerator",
    "clone_tensors": "mk writes every output tensor from its own buffer; there is nothing to clone",
    "trust_remote_code": "mk runs no model code: configurations are read as JSON",
    "lazy_unpickle": "mk reads PyTorch pickles without unpickling objects and safetensors through mmap",
    "safe_serialization": "mk always writes safetensors",
    "read_to_gpu": "it is cuda here: inputs are read into host memory and the GPU gets chunks of them",
    "multi_gpu": "mk uses one GPU",
    "async_write": "mk's writer always runs beside the merge, on its own thread",
    "write_threads": "one writer thread; the shards are written in order",
}

_FIELDS = {f[0]: f for f in _MERGEKIT + _MK}
MK_FIELDS = tuple(f[0] for f in _MK)


class _FieldInfo:
    """What mergekit's model_fields values offer most: the default, and
    whether one is required (none is)."""

    def __init__(self, default, annotation):
        self.default = default
        self.annotation = annotation

    def is_required(self):
        return False

    def __repr__(self):
        return "FieldInfo(annotation=%s, default=%r)" % (self.annotation, self.default)


_ANNOTATIONS = {_BOOL: bool, _INT: int, _STR: str, _SIZE: int, _ANY: object}


class ValidationError(ValueError):
    """A field's value is not of its type (pydantic's ValidationError is
    a ValueError too)."""


def parse_kmb(value):
    """A count with an optional k, m or b suffix (thousands, millions,
    billions), as mergekit's parse_kmb; an int is returned as it is.
    mk's sizes (KiB, MiB, GiB, TiB, G, T) are taken as well."""
    if isinstance(value, bool):
        raise ValidationError("not a size: %r" % (value,))
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    s = str(value).strip()
    if s.isdigit():
        return int(s)
    units = {"k": 1000, "m": 1000 ** 2, "b": 1000 ** 3, "g": 1000 ** 3, "t": 1000 ** 4,
             "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
    num = s.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    unit = s[len(num):].lower()
    try:
        if unit in units and num:
            return int(float(num) * units[unit])
    except ValueError:
        pass
    raise ValidationError("not a size (like 5B, 500M, 64MiB): %r" % (value,))


def _coerce(name, kind, value, optional):
    if value is None:
        if optional:
            return None
        raise ValidationError("MergeOptions.%s: None is not allowed" % name)
    if kind == _BOOL:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no", "on", "off"):
            return value.strip().lower() in ("true", "1", "yes", "on")
        raise ValidationError("MergeOptions.%s: expected a boolean, not %r" % (name, value))
    if kind == _INT:
        if isinstance(value, bool):
            raise ValidationError("MergeOptions.%s: expected an integer, not %r" % (name, value))
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        raise ValidationError("MergeOptions.%s: expected an integer, not %r" % (name, value))
    if kind == _STR:
        if isinstance(value, (str, os.PathLike)):
            return os.fspath(value) if not isinstance(value, str) else value
        raise ValidationError("MergeOptions.%s: expected a string, not %r" % (name, value))
    if kind == _SIZE:
        try:
            return parse_kmb(value)
        except ValidationError as e:
            raise ValidationError("MergeOptions.%s: %s" % (name, e)) from None
    return value


def _gpu_present():
    """device="auto" without torch: a GPU is there when the NVIDIA driver
    shows one (torch, when already imported, is asked instead)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                return "cuda"
            if hasattr(torch, "xpu") and torch.xpu.is_available():
                return "xpu"
            return "cpu"
        except Exception:
            pass
    return "cuda" if os.path.exists("/dev/nvidia0") or os.path.exists("/proc/driver/nvidia/gpus") else "cpu"


class MergeOptions:
    """mergekit's MergeOptions, field for field, and mk's own fields."""

    model_fields = {name: _FieldInfo(f[2], _ANNOTATIONS[f[1]]) for name, f in _FIELDS.items()}

    def __init__(self, **kw):
        values = dict(kw)
        # "verbose": an older mk name of verbosity
        if "verbose" in values and "verbosity" not in values:
            values["verbosity"] = int(values.pop("verbose") or 0)
        else:
            values.pop("verbose", None)
        # mergekit's validators, on the values as given
        if values.get("gpu_rich"):
            for k in ("cuda", "low_cpu_memory", "read_to_gpu", "multi_gpu"):
                values[k] = True
        if not values.get("device"):
            values["device"] = "cuda" if values.get("cuda") or values.get("gpu_rich") else "cpu"
        if values.get("device") == "auto":
            values["device"] = _gpu_present()
        d = {}
        for name, (_, kind, default, optional) in _FIELDS.items():
            d[name] = _coerce(name, kind, values[name], optional) if name in values else default
        for k in values:
            if k in _FIELDS:
                if k in IGNORED_FIELDS and k != "device" and values[k] != _FIELDS[k][2]:
                    log.debug("MergeOptions: %s means nothing to mk (%s); ignored", k, IGNORED_FIELDS[k])
            else:
                warnings.warn("MergeOptions: unknown option %r ignored" % k, stacklevel=2)
        object.__setattr__(self, "_d", d)
        object.__setattr__(self, "_set", frozenset("verbosity" if k == "verbose" else k for k in kw
                                                   if k in _FIELDS or k == "verbose"))
        # a verbosity given sets the mk logger's level (0 warnings, 1
        # info, 2 and more debug), as mergekit's sets its own
        if "verbosity" in self._set:
            log.setLevel(_level(self.verbosity))

    # ---- attribute access, frozen ----
    def __getattr__(self, name):
        d = self.__dict__.get("_d")
        if d is not None and name in d:
            return d[name]
        raise AttributeError("'MergeOptions' object has no attribute %r" % name)

    def __setattr__(self, name, value):
        raise ValidationError("MergeOptions is frozen: use model_copy(update={%r: ...})" % name)

    def __delattr__(self, name):
        raise ValidationError("MergeOptions is frozen")

    # ---- pydantic's BaseModel, as far as it is used ----
    @classmethod
    def model_validate(cls, obj):
        if isinstance(obj, cls):
            return obj
        if not isinstance(obj, dict):
            raise ValidationError("MergeOptions.model_validate: expected a dict, not %s" % type(obj).__name__)
        return cls(**obj)

    def model_dump(self, exclude=None, include=None, exclude_defaults=False, exclude_unset=False, **_):
        out = {}
        for k, v in self._d.items():
            if include is not None and k not in include:
                continue
            if exclude is not None and k in exclude:
                continue
            if exclude_defaults and v == _FIELDS[k][2]:
                continue
            if exclude_unset and k not in self._set:
                continue
            out[k] = v
        return out

    def model_copy(self, update=None, deep=False):
        d = dict((k, v) for k, v in self._d.items() if k in self._set)
        d.update(update or {})
        # the derived device is derived again unless given
        if "device" not in self._set and "device" not in (update or {}):
            d.pop("device", None)
        return type(self)(**d)

    @property
    def model_fields_set(self):
        return set(self._set)

    def dict(self, **kw):
        return self.model_dump(**kw)

    def __iter__(self):
        return iter(self._d.items())

    def __eq__(self, other):
        return isinstance(other, MergeOptions) and self._d == other._d

    def __hash__(self):
        return hash(tuple((k, v if v.__hash__ else id(v)) for k, v in self._d.items()))

    def __repr__(self):
        return "MergeOptions(%s)" % ", ".join("%s=%r" % kv for kv in self._d.items())

    def apply_global_options(self):
        """As mergekit's: the log level from verbosity (0 warnings, 1 info,
        2 and more debug), for the root logger (logging.basicConfig) and
        mk's.  The seed and the threads are the merge's (mk_run_merge)."""
        level = _level(self.verbosity)
        logging.basicConfig(level=level)
        log.setLevel(level)


def _level(verbosity):
    return logging.DEBUG if verbosity > 1 else logging.INFO if verbosity == 1 else logging.WARNING


def _size(v):
    """A size option's bytes (0 when unset) for the C struct."""
    if v is None:
        return 0
    return parse_kmb(v)
