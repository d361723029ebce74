"""Merging tensors in memory (mergekit.merge_methods.api's names):
merge_tensors for the inputs of one output, merge_state_dicts for whole
checkpoints.  libmk's methods run through libmk (the bytes of a YAML
merge); methods written in Python run their kernels here."""
from collections.abc import Mapping

from . import _arrays as A
from ._builtin import BuiltinMethod, _as_raw, _merge_groups, _np
from .base import MergeMethod, PerGroupValues, TensorGroup


def _method(method):
    if isinstance(method, str):
        from .registry import get
        return get(method)
    if not isinstance(method, MergeMethod):
        raise TypeError("expected a merge method or its name, not %r" % (method,))
    return method


def _builtin_merge_tensors(tensors, method, parameters=None, ids=None, base_index=None, name=None, dtype=None,
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


def _builtin_merge_state_dicts(state_dicts, method, parameters=None, base=None, strict=True, dtype=None, out_dtype=None,
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




def merge_tensors(tensors, method, parameters=None, ids=None, base_index=None, name=None, dtype=None,
                  out_dtype=None, seed=0):
    """Merge the inputs of one output tensor (NumPy arrays or torch
    tensors) with a method (a name or a method object).  parameters:
    scalars (shared, or broadcast to every input), sequences (per input,
    in order) or mappings id -> value (ids default to the input
    positions).  dtype casts floating inputs first; out_dtype the output.
    The parameters and the method's input contract are checked before any
    kernel runs; errors raise ValueError or TypeError."""
    m = _method(method)
    if isinstance(m, BuiltinMethod):
        return _builtin_merge_tensors(tensors, m, parameters, ids, base_index, name, dtype, out_dtype, seed)
    group = TensorGroup.from_tensors(list(tensors), ids=ids, base_index=base_index, name=name)
    (out,) = m((group,), parameters=parameters, dtype=dtype, out_dtype=out_dtype)
    return out


def _as_state_dict(model):
    if hasattr(model, "state_dict") and callable(model.state_dict) and not isinstance(model, Mapping):
        model = model.state_dict(keep_vars=True)
    if not isinstance(model, Mapping):
        raise TypeError("expected a module or a state dict, not %s" % type(model).__name__)
    if not all(isinstance(k, str) for k in model):
        raise TypeError("state dict keys must be strings")
    return model


def merge_state_dicts(state_dicts, method, parameters=None, base=None, strict=True, dtype=None, out_dtype=None,
                      seed=0, batch_options=None):
    """Merge state dicts (or modules) {id: {name: tensor}} tensor by
    tensor; a sequence gets ids 0, 1, ...  strict: every dict has the same
    names (else ValueError); otherwise their intersection.  Tensors that
    are not floating must be equal in every input and are copied.  base:
    the id of the base model, or None."""
    if not isinstance(state_dicts, Mapping):
        state_dicts = dict(enumerate(state_dicts))
    if not state_dicts:
        raise ValueError("merge_state_dicts: at least one model is needed")
    state_dicts = {k: _as_state_dict(v) for k, v in state_dicts.items()}
    if base is not None and base not in state_dicts:
        raise ValueError("merge_state_dicts: unknown base input %r" % (base,))
    m = _method(method)
    if isinstance(m, BuiltinMethod):
        return _builtin_merge_state_dicts(state_dicts, m, parameters, base, strict, dtype, out_dtype, seed,
                                          batch_options)
    keys = list(state_dicts)
    m.validate_inputs(keys, base)
    names = [set(sd) for sd in state_dicts.values()]
    common = set.intersection(*names)
    if strict and any(n != common for n in names):
        diff = sorted(set.union(*names) - common)
        raise ValueError("merge_state_dicts: the state dicts' names differ (%s%s); pass strict=False to merge "
                         "their intersection" % (", ".join(diff[:5]), ", ..." if len(diff) > 5 else ""))
    order = [n for n in state_dicts[keys[0]] if n in common]
    out, merged = {}, []
    for n in order:
        ts = [state_dicts[k][n] for k in keys]
        if not A.is_float(ts[0]):
            np = _np()
            first = _as_raw(ts[0], None)[0]
            for k, t in zip(keys[1:], ts[1:]):
                other = _as_raw(t, None)[0]
                if other.shape != first.shape or other.dtype != first.dtype or not np.array_equal(other, first):
                    raise ValueError("merge_state_dicts: %s is not floating and differs between %r and %r"
                                     % (n, keys[0], k))
            out[n] = ts[0]
        else:
            merged.append(n)
    params = {}
    for k, v in (parameters or {}).items():
        if isinstance(v, PerGroupValues):
            if len(v.values) != len(order):
                raise ValueError("parameter %s expects %d group values" % (k, len(order)))
            v = PerGroupValues([v.values[order.index(n)] for n in merged])
        params[k] = v
    bi = keys.index(base) if base is not None else None
    groups = [TensorGroup.from_tensors([state_dicts[k][n] for k in keys], ids=keys, base_index=bi, name=n)
              for n in merged]
    for n, r in zip(merged, m(groups, parameters=params, dtype=dtype, out_dtype=out_dtype,
                              batch_options=batch_options)):
        out[n] = r
    return {n: out[n] for n in order}
