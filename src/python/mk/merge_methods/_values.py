"""Checking a parameter value against its annotation.

pydantic validates when it is installed (the annotations users write
for mergekit, PositiveFloat or Annotated[float, Field(ge=0, le=1)], are
pydantic's).  Without it, the scalar types are checked here and the
bounds read from the annotation's metadata: annotated_types' Ge/Gt/Le/Lt,
or any object with ge/gt/le/lt attributes (a pydantic Field's metadata).
"""
import typing

try:
    from typing import Annotated, get_args, get_origin
except ImportError:  # Python < 3.9
    from typing_extensions import Annotated, get_args, get_origin  # noqa: F401

_MISSING = object()


def strip_annotated(tp):
    """(the type inside any Annotated layers, their metadata in order)."""
    meta = []
    while get_origin(tp) is Annotated:
        args = get_args(tp)
        tp, meta = args[0], meta + list(args[1:])
    return tp, meta


def bounds(meta):
    """{'ge'|'gt'|'le'|'lt': number} from annotation metadata."""
    out = {}
    for m in meta:
        for sub in [m] + list(getattr(m, "metadata", None) or []):
            for k in ("ge", "gt", "le", "lt"):
                v = getattr(sub, k, None)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[k] = v
    return out


def _adapter(tp):
    try:
        from pydantic import TypeAdapter
    except ImportError:
        return None
    try:
        return TypeAdapter(tp)
    except Exception:  # a type pydantic cannot build a validator for
        return None


class Checker:
    """Validates values of one annotation; check(value) returns the value
    as the kernel gets it, or raises ValueError/TypeError."""

    def __init__(self, tp):
        self.tp = tp
        self.base, meta = strip_annotated(tp)
        self.bounds = bounds(meta)
        self._ad = _adapter(tp)

    def check(self, value):
        b = self.base
        if self._ad is not None:
            value = self._ad.validate_python(value)
        elif b is bool:
            if not isinstance(value, bool):
                raise TypeError("expected a bool, not %r" % (value,))
        elif b is int:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError("expected an integer, not %r" % (value,))
            if isinstance(value, float):
                if not value.is_integer():
                    raise ValueError("expected an integer, not %r" % (value,))
                value = int(value)
        elif b is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError("expected a number, not %r" % (value,))
            value = float(value)
        elif b is str:
            if not isinstance(value, str):
                raise TypeError("expected a string, not %r" % (value,))
        elif isinstance(b, type) and b is not typing.Any:
            if not isinstance(value, b):
                raise TypeError("expected %s, not %r" % (b.__name__, value))
        for k, lim in self.bounds.items():   # (pydantic's own bounds again: the same answer)
            ok = {"ge": value >= lim, "gt": value > lim, "le": value <= lim, "lt": value < lim}[k]
            if not ok:
                raise ValueError("%r is not %s %r" % (value, {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}[k], lim))
        return value
