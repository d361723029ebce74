"""The methods available by name (mergekit.merge_methods.registry's
names): libmk's (built-ins and plugins) and the Python methods
registered in this process."""
import threading

from ._builtin import BuiltinMethod, methods
from .base import MergeMethod

__all__ = ["get", "register", "registered_methods"]

_python = {}
_lock = threading.Lock()


class UnknownMethodError(KeyError, RuntimeError):
    """No method of that name (a KeyError, and a RuntimeError as mergekit
    raises)."""

    def __str__(self):
        return self.args[0] if self.args else ""


def register(method):
    """Make a method usable by name: by get(), merge_tensors(name, ...) and
    YAML configurations run in this process.  A name already taken (a
    built-in's, another method's) is refused with ValueError."""
    if not isinstance(method, MergeMethod) or method.spec is None:
        raise TypeError("register() takes a merge method (merge_method(...) makes one), not %r" % (method,))
    name = method.spec.name
    with _lock:
        if name in _python or name in methods():
            raise ValueError("merge method %r is already registered" % name)
        from . import _bridge
        _bridge.register(method)
        _python[name] = method


def get(name):
    """The method registered under this name."""
    m = _python.get(name)
    if m is not None:
        return m
    try:
        return BuiltinMethod(name)
    except KeyError:
        raise UnknownMethodError("mk: no merge method %r (mk.methods() lists them)" % name) from None


def registered_methods():
    """Every method available by name: libmk's, then the Python ones, in
    registration order."""
    return tuple(_python[n] if n in _python else BuiltinMethod(n) for n in methods())
