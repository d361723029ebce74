"""Model references (mergekit.common's names): ModelPath, ModelReference,
and the small data-class layer mk.config's objects are built on.

The objects behave as mergekit's pydantic models do where a user meets
them: keyword construction, attribute access, model_validate, model_dump
(mode, exclude_defaults, exclude_none, exclude_unset, include, exclude),
model_dump_json, model_copy, equality, and hashing for the frozen ones.
Validation is structural and lists every problem at once in one
mk.errors.ConfigError, each with its path ("models.1.parameters.weight").
Pure Python: nothing here opens a model.
"""
import binascii
import copy
import json
import math
import os
from collections.abc import Mapping

from .errors import ConfigError

__all__ = ["ModelPath", "ModelReference", "ImmutableMap", "parse_kmb", "get_config_value", "set_config_value"]

_REQUIRED = object()


class _Bad:
    """A value that failed validation: present (truthy), never kept."""

    def __bool__(self):
        return True

    def __repr__(self):
        return "<invalid>"


_BAD = _Bad()


def _kind(v):
    """How a value is named in a message."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean (%s)" % ("true" if v else "false")
    if isinstance(v, (int, float)):
        return "a number (%r)" % (v,)
    if isinstance(v, str):
        return "a string (%r)" % (v if len(v) <= 40 else v[:37] + "...")
    if isinstance(v, (list, tuple)):
        return "a list"
    if isinstance(v, dict):
        return "a mapping"
    return "a %s" % type(v).__name__


class _Issues:
    """Problems found while validating: (path, message) pairs."""

    def __init__(self, label="config", marks=None):
        self.items = []
        self.label = label
        self.marks = marks or {}

    def add(self, path, message):
        self.items.append((tuple(path), message))

    def lines(self):
        out = []
        for path, msg in self.items:
            where = self.label
            mark = self._mark(path)
            if mark:
                where += ":%d:%d" % mark
            p = ".".join(str(x) for x in path)
            out.append("error: %s: %s%s" % (where, p + ": " if p else "", msg))
        return out

    def _mark(self, path):
        # the nearest node of the source text that exists
        p = tuple(path)
        while True:
            if p in self.marks:
                return self.marks[p]
            if not p:
                return None
            p = p[:-1]

    def raise_if_any(self):
        if self.items:
            lines = self.lines()
            raise ConfigError("\n".join(lines), lines)


# Value types.  Each is a callable (value, path, issues) -> value or _BAD,
# reporting what it refuses.

def _str(v, path, issues):
    if isinstance(v, str):
        return str(v)
    issues.add(path, "expected a string, got %s" % _kind(v))
    return _BAD


def _int(v, path, issues):
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            pass
    issues.add(path, "expected an integer, got %s" % _kind(v))
    return _BAD


def _float(v, path, issues):
    if isinstance(v, (bool, int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            pass
    issues.add(path, "expected a number, got %s" % _kind(v))
    return _BAD


_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}


def _bool(v, path, issues):
    if isinstance(v, bool):
        return bool(v)
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in _TRUE | _FALSE:
        return v.strip().lower() in _TRUE
    issues.add(path, "expected a boolean, got %s" % _kind(v))
    return _BAD


def _optional(of):
    def check(v, path, issues):
        return None if v is None else of(v, path, issues)
    return check


def _literal(*choices):
    def check(v, path, issues):
        if isinstance(v, str) and v in choices:
            return str(v)
        issues.add(path, "expected %s, got %s" % (" or ".join(repr(c) for c in choices), _kind(v)))
        return _BAD
    return check


def _list(of):
    def check(v, path, issues):
        if not isinstance(v, (list, tuple)):
            issues.add(path, "expected a list, got %s" % _kind(v))
            return _BAD
        return [of(x, path + (i,), issues) for i, x in enumerate(v)]
    return check


def _pair(of):
    def check(v, path, issues):
        if not isinstance(v, (list, tuple)) or len(v) != 2:
            issues.add(path, "expected a list of two, got %s" % (
                "a list of %d" % len(v) if isinstance(v, (list, tuple)) else _kind(v)))
            return _BAD
        return tuple(of(x, path + (i,), issues) for i, x in enumerate(v))
    return check


def _mapping(of):
    def check(v, path, issues):
        if not isinstance(v, dict):
            issues.add(path, "expected a mapping, got %s" % _kind(v))
            return _BAD
        out = {}
        for k, x in v.items():
            if not isinstance(k, str):
                issues.add(path + (k,), "keys must be strings, not %s" % _kind(k))
                continue
            out[str(k)] = of(x, path + (k,), issues)
        return out
    return check


def _model(cls, what=None):
    """An instance of cls as it is, or one made from a mapping."""
    def check(v, path, issues):
        if isinstance(v, cls):
            return v
        if isinstance(v, dict):
            return cls._build(v, path, issues)
        issues.add(path, "expected %s, got %s" % (what or "a mapping (%s)" % cls.__name__, _kind(v)))
        return _BAD
    return check


class _Field:
    """One field: its name, checker, default (or required)."""

    def __init__(self, name, check, default=None):
        self.name = name
        self.check = check
        self.default = default

    def is_required(self):
        return self.default is _REQUIRED

    def __repr__(self):
        return "Field(%s%s)" % (self.name, "" if self.is_required() else ", default=%r" % (self.default,))


class _Options:
    def __init__(self, mode="python", exclude_defaults=False, exclude_none=False, exclude_unset=False):
        if mode not in ("python", "json"):
            raise ValueError("mode must be 'python' or 'json', not %r" % (mode,))
        self.json = mode == "json"
        self.exclude_defaults = exclude_defaults
        self.exclude_none = exclude_none
        self.exclude_unset = exclude_unset


def _pick(spec, key):
    """The part of an include/exclude spec for one key: None (none of it),
    True (all of it) or a nested spec."""
    if spec is None:
        return None
    if isinstance(spec, (set, frozenset, list, tuple)):
        return True if key in spec else None
    if isinstance(spec, dict):
        sub = spec.get(key, spec.get("__all__") if isinstance(key, int) else None)
        if sub is None or sub is False:
            return None
        return True if sub is True or sub is Ellipsis else sub
    raise TypeError("include/exclude: expected a set or a dict, not %s" % type(spec).__name__)


def _dump(v, o, include=None, exclude=None):
    """A value as model_dump gives it."""
    if isinstance(v, _Model):
        return v._dump(o, include, exclude)
    if isinstance(v, (list, tuple)):
        out = []
        for i, x in enumerate(v):
            if _keep(i, include, exclude):
                out.append(_dump(x, o, _sub(include, i), _sub(exclude, i)))
        return out if o.json or isinstance(v, list) else tuple(out)
    if isinstance(v, Mapping):
        return {(str(k) if o.json else k): _dump(x, o, _sub(include, k), _sub(exclude, k))
                for k, x in v.items() if _keep(k, include, exclude)}
    return v


def _keep(key, include, exclude):
    if include is not None and include is not True and _pick(include, key) is None:
        return False
    if exclude is not None and exclude is not True and _pick(exclude, key) is True:
        return False
    return True


def _sub(spec, key):
    """The include/exclude spec below key (None: no restriction)."""
    if spec is None or spec is True:
        return None
    s = _pick(spec, key)
    return None if s is True else s


class _Model:
    """The base of the configuration objects (pydantic.BaseModel's ways).

    A subclass lists its fields in _fields (_Field objects, in the order a
    dump gives them), may check the whole object in _check (after its
    fields: every problem lands in the same list), may turn a non-mapping
    input into a mapping in _coerce, and is immutable and hashable when
    _frozen."""

    _fields = ()
    _frozen = False

    def __init__(self, **data):
        issues = _Issues(type(self).__name__)
        self._fill(data, (), issues)
        issues.raise_if_any()

    @classmethod
    def model_validate(cls, obj):
        """An instance from a mapping (or an instance, returned as it is).
        Raises mk.errors.ConfigError listing every problem."""
        if isinstance(obj, cls):
            return obj
        issues = _Issues(cls.__name__ if cls.__name__ != "MergeConfiguration" else "config")
        self = cls._build(obj, (), issues)
        issues.raise_if_any()
        return self

    @classmethod
    def _build(cls, data, path, issues):
        data = cls._coerce(data, path, issues)
        if data is _BAD:
            return _BAD
        if not isinstance(data, dict):
            issues.add(path, "expected a mapping (%s), got %s" % (cls.__name__, _kind(data)))
            return _BAD
        self = cls.__new__(cls)
        self._fill(data, path, issues)
        return self

    @classmethod
    def _coerce(cls, data, path, issues):
        return data

    def _fill(self, data, path, issues):
        values, given = {}, set()
        for f in self._fields:
            if f.name in data:
                given.add(f.name)
                values[f.name] = f.check(data[f.name], path + (f.name,), issues)
            elif f.is_required():
                issues.add(path + (f.name,), "required field missing")
                values[f.name] = _BAD
            else:
                values[f.name] = copy.deepcopy(f.default)
        d = self.__dict__
        d.update(values)
        d["_fields_set"] = given
        self._check(path, issues)

    def _check(self, path, issues):
        pass

    def __setattr__(self, name, value):
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        f = self._field(name)
        if f is None:
            raise ValueError('"%s" object has no field "%s"' % (type(self).__name__, name))
        if self._frozen:
            raise ConfigError("%s is frozen: %s cannot be set" % (type(self).__name__, name), [])
        issues = _Issues(type(self).__name__)
        v = f.check(value, (name,), issues)
        issues.raise_if_any()
        self.__dict__[name] = v
        self.__dict__["_fields_set"].add(name)

    def __delattr__(self, name):
        raise AttributeError("%s: fields cannot be deleted" % type(self).__name__)

    @classmethod
    def _field(cls, name):
        for f in cls._fields:
            if f.name == name:
                return f
        return None

    @property
    def model_fields_set(self):
        return set(self.__dict__["_fields_set"])

    @classmethod
    def _model_fields(cls):
        return {f.name: f for f in cls._fields}

    def model_dump(self, *, mode="python", include=None, exclude=None, exclude_unset=False,
                   exclude_defaults=False, exclude_none=False, by_alias=False, round_trip=False, warnings=True):
        """The object as plain data, as pydantic's model_dump: mode="json"
        gives lists for tuples; exclude_defaults leaves out fields equal to
        their default, exclude_none those that are None, exclude_unset
        those not given."""
        return self._dump(_Options(mode, exclude_defaults, exclude_none, exclude_unset), include, exclude)

    def model_dump_json(self, *, indent=None, include=None, exclude=None, exclude_unset=False,
                        exclude_defaults=False, exclude_none=False, by_alias=False, round_trip=False,
                        warnings=True):
        """model_dump(mode="json") as JSON text, written as pydantic writes it
        (compact unless indent; floats in its notation; NaN and infinities as
        null)."""
        data = self._dump(_Options("json", exclude_defaults, exclude_none, exclude_unset), include, exclude)
        return _json_text(data, indent)

    def _dump(self, o, include=None, exclude=None):
        out = {}
        for f in self._fields:
            v = self.__dict__.get(f.name)
            if not _keep(f.name, include, exclude):
                continue
            if o.exclude_unset and f.name not in self.__dict__["_fields_set"]:
                continue
            if o.exclude_none and v is None:
                continue
            if o.exclude_defaults and not f.is_required() and _same(v, f.default):
                continue
            out[f.name] = _dump(v, o, _sub(include, f.name), _sub(exclude, f.name))
        return out

    def model_copy(self, *, update=None, deep=False):
        """A copy, with update's fields replaced (not validated, as pydantic)."""
        new = copy.deepcopy(self) if deep else copy.copy(self)
        d = dict(new.__dict__)
        d["_fields_set"] = set(d["_fields_set"])
        for k, v in (update or {}).items():
            d[k] = v
            d["_fields_set"].add(k)
        object.__setattr__(new, "__dict__", d)
        return new

    def __copy__(self):
        new = type(self).__new__(type(self))
        d = dict(self.__dict__)
        d["_fields_set"] = set(d["_fields_set"])
        object.__setattr__(new, "__dict__", d)
        return new

    def __deepcopy__(self, memo):
        new = type(self).__new__(type(self))
        object.__setattr__(new, "__dict__", copy.deepcopy(self.__dict__, memo))
        return new

    def __iter__(self):
        for f in self._fields:
            yield f.name, self.__dict__.get(f.name)

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return all(self.__dict__.get(f.name) == other.__dict__.get(f.name) for f in self._fields)

    def __hash__(self):
        if not self._frozen:
            raise TypeError("unhashable type: '%s'" % type(self).__name__)
        return hash((type(self).__name__,) + tuple(_hashable(self.__dict__.get(f.name)) for f in self._fields))

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__,
                           ", ".join("%s=%r" % (f.name, self.__dict__.get(f.name)) for f in self._fields))


def _same(a, b):
    """Equality that tells 1 from 1.0 and from True (a default is left out
    of a dump only when it is the same value of the same type)."""
    if type(a) is not type(b) and not (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _hashable(v):
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v


def _json_float(x):
    """A float as pydantic's JSON writes it: Python's shortest digits, an
    exponent without padding ("1e-7", "1e+16"), and 1e-5's decade in plain
    notation ("0.00001")."""
    if not math.isfinite(x):
        return "null"
    r = repr(x)
    if "e" not in r:
        return r
    mant, exp = r.split("e")
    e = int(exp)
    if e == -5:
        sign = "-" if mant.startswith("-") else ""
        digits = mant.lstrip("-").replace(".", "")
        return sign + "0.0000" + digits
    return "%se%s%d" % (mant, "-" if e < 0 else "+", abs(e))


def _json_text(v, indent=None, level=0):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        return _json_float(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple, dict)):
        items = ([_json_text(x, indent, level + 1) for x in v] if not isinstance(v, dict) else
                 ["%s:%s%s" % (json.dumps(str(k), ensure_ascii=False), "" if indent is None else " ",
                               _json_text(x, indent, level + 1)) for k, x in v.items()])
        o, c = ("{", "}") if isinstance(v, dict) else ("[", "]")
        if not items:
            return o + c
        if indent is None:
            return o + ",".join(items) + c
        pad, inner = " " * (indent * level), " " * (indent * (level + 1))
        return o + "\n" + ",\n".join(inner + x for x in items) + "\n" + pad + c
    return json.dumps(str(v), ensure_ascii=False)


class ModelPath(_Model):
    """A model's path or Hugging Face repo id, with an optional revision:
    "org/name@rev" parses to path "org/name", revision "rev"."""

    _frozen = True

    @classmethod
    def _coerce(cls, data, path, issues):
        if isinstance(data, str):
            if data.count("@") > 1:
                issues.add(path, "invalid model path %r: more than one @" % data)
                return _BAD
            if "@" in data:
                p, rev = data.split("@")
                return {"path": p, "revision": rev}
            return {"path": data}
        return data

    def __str__(self):
        return "%s@%s" % (self.path, self.revision) if self.revision else self.path

    def _unique_id(self):
        return os.path.basename(self.path) + "_" + str(binascii.crc32(str(self).encode()))


ModelPath._fields = (_Field("path", _str, _REQUIRED), _Field("revision", _optional(_str)))


class ModelReference(_Model):
    """A reference to a model: a path or repo id, optionally with a LoRA
    adapter ("org/model+org/lora") and an architecture to use in place of
    the one its config.json names."""

    _frozen = True

    @classmethod
    def _coerce(cls, data, path, issues):
        if isinstance(data, str):
            parts = data.split("+")
            if len(parts) > 2:
                issues.add(path, "cannot parse model reference %r: more than one +" % data)
                return _BAD
            return {"model": parts[0]} if len(parts) == 1 else {"model": parts[0], "lora": parts[1]}
        return data

    @classmethod
    def parse(cls, value):
        """From its text: '<model path>[@revision][+<lora path>[@revision]]'."""
        return cls.model_validate(value)

    def __str__(self):
        return "%s+%s" % (self.model, self.lora) if self.lora else str(self.model)

    def _dump(self, o, include=None, exclude=None):
        # written as its text unless it names an architecture
        if self.override_architecture is not None:
            return {"model": _dump(self.model, o), "lora": _dump(self.lora, o),
                    "override_architecture": self.override_architecture}
        return str(self)

    def local_path(self, cache_dir=None, ignore_lora=False):
        """The model's directory when it is on this machine (mk downloads
        Hugging Face repos itself, when a merge runs with remote=True)."""
        if not ignore_lora and self.lora is not None:
            raise ValueError("%s: the LoRA is not merged; mk merges it when the merge runs" % self)
        if os.path.isdir(self.model.path):
            return self.model.path
        raise FileNotFoundError("%s: not a local directory" % self.model.path)


def _model_ref(v, path, issues):
    if isinstance(v, ModelReference):
        return v
    if isinstance(v, (str, dict)):
        return ModelReference._build(v, path, issues)
    issues.add(path, "expected a model reference (text or mapping), got %s" % _kind(v))
    return _BAD


def _model_path(v, path, issues):
    if isinstance(v, ModelPath):
        return v
    if isinstance(v, (str, dict)):
        return ModelPath._build(v, path, issues)
    issues.add(path, "expected a model path (text or mapping), got %s" % _kind(v))
    return _BAD


ModelReference._fields = (_Field("model", _model_path, _REQUIRED), _Field("lora", _optional(_model_path)),
                          _Field("override_architecture", _optional(_str)))


def parse_kmb(value):
    """An integer from "250", "20k", "5M" or "1B" (decimal multipliers)."""
    if isinstance(value, int):
        return value
    if value.isnumeric():
        return int(value)
    mult = {"k": 10 ** 3, "m": 10 ** 6, "b": 10 ** 9}.get(value[-1:].lower())
    if mult is None:
        raise ValueError(value)
    return int(value[:-1]) * mult


def _walk(obj, key):
    parts = key.split(".")
    for i, part in enumerate(parts):
        if not hasattr(obj, part):
            raise RuntimeError("Config %s has no attribute %s" % (obj, ".".join(parts[:i + 1])))
        obj = getattr(obj, part)
    return obj


def get_config_value(config, key):
    """The attribute a dotted key names ("text_config.hidden_size")."""
    return _walk(config, key)


def set_config_value(config, key, value):
    """Set the attribute a dotted key names."""
    head, _, last = key.rpartition(".")
    setattr(_walk(config, head) if head else config, last, value)


class ImmutableMap(Mapping):
    """A read-only mapping (mergekit's ImmutableMap, without immutables)."""

    def __init__(self, data):
        self.data = dict(data)

    def __getitem__(self, key):
        return self.data[key]

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)

    def __hash__(self):
        return hash(frozenset(self.data.items()))

    def __repr__(self):
        return "ImmutableMap(%r)" % (self.data,)
