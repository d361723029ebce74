"""The method API's objects (mergekit.merge_methods.base's names): groups
and batches of tensors, parameter scopes and specs, input contracts, and
the two kinds of Python methods, group kernels and batch kernels.

Tensors are NumPy arrays or torch tensors; a method's kernel gets the
kind its annotations name (torch.Tensor or numpy.ndarray), converted
without a copy where the dtype allows."""
import abc
import enum
from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar

from . import _arrays as A
from ._values import Annotated, Checker, _MISSING

MISSING = _MISSING

T = TypeVar("T")


class ParameterScope(str, enum.Enum):
    """Which inputs a parameter has a value for: the output (SHARED), every
    input (INPUT) or every input but the base (NON_BASE)."""
    SHARED = "shared"
    INPUT = "input"
    NON_BASE = "non_base"


class BasePolicy(str, enum.Enum):
    OPTIONAL = "optional"
    REQUIRED = "required"
    FORBIDDEN = "forbidden"
    IGNORED = "ignored"


class OptionalTensorPolicy(str, enum.Enum):
    """What a YAML merge does with an optional weight some inputs lack."""
    ERROR = "error"
    PASSTHROUGH_SINGLETON = "passthrough_singleton"
    PASSTHROUGH_BASE_SINGLETON = "passthrough_base_singleton"
    BASE_OR_SKIP = "base_or_skip"


class BatchParameter:
    """Marks a batch kernel's tensor argument as coefficients: value_type
    is the scalar (float, int, bool, constraints inside), scope which
    inputs have one ([B] for SHARED, [B, N] otherwise)."""

    def __init__(self, value_type, scope=ParameterScope.SHARED):
        self.value_type = value_type
        self.scope = ParameterScope(scope)

    def __eq__(self, other):
        return isinstance(other, BatchParameter) and (self.value_type, self.scope) == (other.value_type, other.scope)

    def __hash__(self):
        return hash((BatchParameter, self.scope))

    def __repr__(self):
        return "BatchParameter(%r, %s)" % (self.value_type, self.scope)


class PerInputValues(Mapping, Generic[T]):
    """Values keyed by input id, in input order."""

    def __init__(self, items):
        items = list(items)
        self._data = dict(items)
        if len(self._data) != len(items):
            raise ValueError("duplicate input ids in a per-input parameter")

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)

    def __repr__(self):
        return "PerInputValues(%r)" % (list(self._data.items()),)

    def values_for(self, entries):
        return [self[e.id] for e in entries]


class PerGroupValues(Generic[T]):
    """One value per group of a call (each a scalar, a sequence or a
    mapping id -> value)."""

    def __init__(self, values):
        self.values = tuple(values)

    def __len__(self):
        return len(self.values)

    def __getitem__(self, i):
        return self.values[i]

    def __eq__(self, other):
        return isinstance(other, PerGroupValues) and self.values == other.values

    def __hash__(self):
        return hash(self.values)

    def __repr__(self):
        return "PerGroupValues(%r)" % (self.values,)


PerInput = Annotated[PerInputValues[T], ParameterScope.INPUT]
PerNonBase = Annotated[PerInputValues[T], ParameterScope.NON_BASE]


class ParameterSpec:
    """A parameter: name, value type (constraints included), scope, default
    (MISSING: required), and whether a batch kernel gets it as a
    coefficient tensor."""

    def __init__(self, name, value_type, scope=ParameterScope.SHARED, default=MISSING, description=None,
                 batch_tensor=False):
        self.name = name
        self.value_type = value_type
        self.scope = ParameterScope(scope)
        self.default = default
        self.description = description
        self.batch_tensor = batch_tensor
        self._checker = Checker(value_type)

    @property
    def required(self):
        return self.default is MISSING

    def validate(self, value):
        try:
            return self._checker.check(value)
        except (TypeError, ValueError) as e:   # (pydantic's errors are ValueErrors)
            kind = TypeError if isinstance(e, TypeError) else ValueError
            raise kind("parameter %s: %s" % (self.name, e)) from None

    def __repr__(self):
        return "ParameterSpec(%r, %r, %s%s)" % (self.name, self.value_type, self.scope,
                                                "" if self.required else ", default=%r" % (self.default,))


class InputContract:
    """What inputs each group must have: a base policy and bounds on the
    inputs and the non-base inputs (None: no bound)."""

    def __init__(self, base=BasePolicy.IGNORED, min_inputs=1, max_inputs=None, min_non_base=None,
                 max_non_base=None):
        self.base = BasePolicy(base)
        self.min_inputs, self.max_inputs = min_inputs, max_inputs
        self.min_non_base, self.max_non_base = min_non_base, max_non_base
        for n in ("min_inputs", "min_non_base"):
            v = getattr(self, n)
            if v is not None and v < 0:
                raise ValueError("%s cannot be negative" % n)
        for lo, hi in (("min_inputs", "max_inputs"), ("min_non_base", "max_non_base")):
            if getattr(self, hi) is not None and getattr(self, hi) < (getattr(self, lo) or 0):
                raise ValueError("%s cannot be less than %s" % (hi, lo))

    def __repr__(self):
        return ("InputContract(base=%s, min_inputs=%r, max_inputs=%r, min_non_base=%r, max_non_base=%r)"
                % (self.base, self.min_inputs, self.max_inputs, self.min_non_base, self.max_non_base))

    def validate_ids(self, input_ids, base_id=None, group_name=None):
        where = " for %s" % group_name if group_name else ""
        ids = list(input_ids)
        if any(i is None for i in ids):
            raise ValueError("merge input ids cannot be None")
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate merge inputs%s" % where)
        if self.base == BasePolicy.IGNORED:
            base_id = None
        has_base = base_id is not None and base_id in ids
        if base_id is not None and not has_base:
            raise ValueError("the base input is not among the merge inputs%s" % where)
        if self.base == BasePolicy.REQUIRED and not has_base:
            raise ValueError("the merge method requires a base input%s" % where)
        if self.base == BasePolicy.FORBIDDEN and has_base:
            raise ValueError("the merge method does not accept a base input%s" % where)
        self._count("inputs", len(ids), self.min_inputs, self.max_inputs, where)
        if self.min_non_base is not None or self.max_non_base is not None:
            self._count("non-base inputs", len(ids) - int(has_base), self.min_non_base or 0, self.max_non_base,
                        where)

    @staticmethod
    def _count(what, n, lo, hi, where):
        if n < lo:
            raise ValueError("the merge method requires at least %d %s%s; got %d" % (lo, what, where, n))
        if hi is not None and n > hi:
            need = "exactly %d" % lo if lo == hi else "at most %d" % hi
            raise ValueError("the merge method requires %s %s%s; got %d" % (need, what, where, n))


class TensorMetadata:
    def __init__(self, name=None, vocabulary_axis=None):
        if vocabulary_axis is not None and (type(vocabulary_axis) is not int or vocabulary_axis < 0):
            raise ValueError("vocabulary_axis must be a nonnegative integer or None")
        self.name, self.vocabulary_axis = name, vocabulary_axis

    @classmethod
    def from_weight_info(cls, weight):
        return cls(name=weight.name, vocabulary_axis=getattr(weight, "vocabulary_axis", None))

    def __repr__(self):
        return "TensorMetadata(name=%r, vocabulary_axis=%r)" % (self.name, self.vocabulary_axis)


class TensorEntry:
    """One input: its id (hashable, not None), tensor and whether it is
    the base."""

    def __init__(self, id, tensor, is_base=False):
        if id is None:
            raise ValueError("merge input ids cannot be None")
        hash(id)
        if not A.is_array(tensor):
            raise TypeError("TensorEntry.tensor must be a NumPy array or a torch tensor")
        self.id, self.tensor, self.is_base = id, tensor, bool(is_base)

    def replace(self, tensor):
        return TensorEntry(self.id, tensor, self.is_base)

    def __repr__(self):
        return "TensorEntry(id=%r, shape=%s, is_base=%r)" % (self.id, tuple(self.tensor.shape), self.is_base)


class TensorGroup:
    """The inputs of one output tensor, with metadata (its name, the
    vocabulary axis)."""

    def __init__(self, entries, metadata=None):
        self.entries = tuple(entries)
        self.metadata = metadata if metadata is not None else TensorMetadata()
        if isinstance(self.metadata, dict):
            self.metadata = TensorMetadata(**self.metadata)
        if len({e.id for e in self.entries}) != len(self.entries):
            raise ValueError("duplicate tensor input ids")
        if sum(e.is_base for e in self.entries) > 1:
            raise ValueError("a tensor group can have at most one base input")

    @classmethod
    def from_tensors(cls, tensors, ids=None, base_index=None, name=None, vocabulary_axis=None):
        tensors = list(tensors)
        ids = tuple(range(len(tensors))) if ids is None else tuple(ids)
        if len(ids) != len(tensors):
            raise ValueError("ids and tensors must have the same length")
        if base_index is not None and not 0 <= base_index < len(tensors):
            raise ValueError("base_index is out of range")
        return cls((TensorEntry(k, t, i == base_index) for i, (k, t) in enumerate(zip(ids, tensors))),
                   TensorMetadata(name, vocabulary_axis))

    @property
    def base(self):
        return next((e for e in self.entries if e.is_base), None)

    @property
    def non_base(self):
        return tuple(e for e in self.entries if not e.is_base)

    @property
    def tensors(self):
        return tuple(e.tensor for e in self.entries)

    @property
    def ids(self):
        return [e.id for e in self.entries]

    @property
    def base_index(self):
        return next((i for i, e in enumerate(self.entries) if e.is_base), None)

    @property
    def name(self):
        return self.metadata.name

    def replace(self, entries):
        return TensorGroup(entries, self.metadata)

    def validate_tensors(self):
        if not self.entries:
            return
        shapes = [tuple(e.tensor.shape) for e in self.entries]
        axis = self.metadata.vocabulary_axis
        if axis is not None and any(axis >= len(s) for s in shapes):
            raise ValueError("invalid vocabulary_axis=%d for %s: %s" % (axis, self.metadata.name, shapes))
        if any(s != shapes[0] for s in shapes):
            hint = ""
            if axis is not None:
                hint = (" Align the vocabularies before merging (a YAML merge does it with a tokenizer "
                        "setting, e.g. tokenizer: {source: base}); other dimensions must already match.")
            raise ValueError("tensor size mismatch for %s: %s.%s" % (self.metadata.name, shapes, hint))
        if not A.same_device(self.tensors):
            raise ValueError("the inputs of %s must be on one device" % self.metadata.name)
        if len({A.kind_of(t) for t in self.tensors}) > 1:
            raise ValueError("the inputs of %s mix NumPy arrays and torch tensors" % self.metadata.name)


class BatchOptions:
    """Limits on one batch kernel call's packed inputs and coefficients
    (bytes) and groups; a single larger group runs alone.  The results
    do not depend on them."""

    def __init__(self, max_bytes=64 * 1024 * 1024, max_groups=256):
        # (None or 0 was mk's "no limit" before the mergekit defaults)
        self.max_bytes = max_bytes if max_bytes else float("inf")
        self.max_groups = max_groups if max_groups else float("inf")
        if self.max_bytes <= 0 or self.max_groups <= 0:
            raise ValueError("batch limits must be positive")

    def c_limits(self):
        """(max_bytes, max_groups) for libmk: 0 for no limit."""
        inf = float("inf")
        return (0 if self.max_bytes == inf else int(self.max_bytes), 0 if self.max_groups == inf else
                int(self.max_groups))


class TensorBatch:
    """A batch kernel's inputs: N borrowed arrays shaped [B, *weight_shape]
    (one shape, dtype and device), and the base's position or None."""

    def __init__(self, tensors, base_index=None):
        if A.is_array(tensors):
            raise TypeError("TensorBatch expects a sequence of tensors")
        self.tensors = tuple(tensors)
        if not self.tensors or any(len(t.shape) < 1 or t.shape[0] < 1 for t in self.tensors):
            raise ValueError("TensorBatch requires nonempty output and input axes")
        f = self.tensors[0]
        if any(tuple(t.shape) != tuple(f.shape) or t.dtype != f.dtype for t in self.tensors[1:]) or \
                not A.same_device(self.tensors):
            raise ValueError("TensorBatch inputs must have matching shapes, dtypes and devices")
        if base_index is not None and not 0 <= base_index < len(self.tensors):
            raise ValueError("base_index is out of range")
        self.base_index = base_index


class MergeMethodSpec:
    def __init__(self, name, parameters=(), contract=None, pretty_name=None, reference_url=None,
                 optional_tensor_policy=OptionalTensorPolicy.ERROR, uses_accelerator=True, elementwise=False):
        self.name = name
        # mk's: each output element depends on the same element of the
        # inputs alone, so a YAML merge may call the kernel on pieces of a
        # tensor (1-D) instead of holding it whole
        self.elementwise = bool(elementwise)
        self.parameters = tuple(parameters)
        self.contract = contract or InputContract()
        self.pretty_name = pretty_name
        self.reference_url = reference_url
        self.optional_tensor_policy = OptionalTensorPolicy(optional_tensor_policy)
        self.uses_accelerator = uses_accelerator
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise ValueError("duplicate parameter names for merge method %s" % name)
        if self.contract.base == BasePolicy.IGNORED and any(p.scope == ParameterScope.NON_BASE
                                                            for p in self.parameters):
            raise ValueError("non-base parameters need a base-aware input contract (base not IGNORED)")

    @property
    def shared_parameters(self):
        return tuple(p for p in self.parameters if p.scope == ParameterScope.SHARED)

    @property
    def input_parameters(self):
        return tuple(p for p in self.parameters if p.scope != ParameterScope.SHARED)


def _check_dtype(name, value):
    if value is None:
        return None
    from .._lib import _DT
    n = str(value).replace("torch.", "") if not isinstance(value, str) else value.replace("torch.", "")
    if not isinstance(value, str) and not type(value).__module__.startswith("torch"):
        n = A.np().dtype(value).name
    if n not in ("float16", "bfloat16", "float32", "float64") or n not in _DT:
        raise ValueError("%s must be a floating-point dtype, not %r" % (name, value))
    return n


class MergeMethod(abc.ABC):
    """Binding of parameters to groups, and validation, for every method."""

    spec = None
    supports_batching = False
    kind = None     # the array kind the kernel works on ('torch', 'numpy'), None: either

    def __repr__(self):
        return "<merge method %s>" % self.spec.name

    @property
    def name(self):
        return self.spec.name

    def validate_inputs(self, input_ids, base_id=None, group_name=None):
        self.spec.contract.validate_ids(input_ids, base_id, group_name=group_name)

    def __call__(self, groups, parameters=None, dtype=None, out_dtype=None, batch_options=None, seed=0):
        if isinstance(groups, TensorGroup):
            groups = [groups]
        groups = tuple(groups)
        if not all(isinstance(g, TensorGroup) for g in groups):
            raise TypeError("merge inputs must be a sequence of TensorGroup values")
        bound = self._bind_parameters(groups, parameters or {})
        return self._execute_resolved(groups, bound, dtype=dtype, out_dtype=out_dtype, batch_options=batch_options)

    def _execute_resolved(self, groups, parameters, dtype=None, out_dtype=None, batch_options=None):
        dtype, out_dtype = _check_dtype("dtype", dtype), _check_dtype("out_dtype", out_dtype)
        groups = tuple(self._own_kind(g) for g in groups)
        dts = [(dtype or A.promote(g.tensors)) if g.entries else dtype for g in groups]
        return self._execute(groups, parameters, batch_options or BatchOptions(), dts, out_dtype)

    def _own_kind(self, group):
        if self.kind is None or all(A.kind_of(t) == self.kind for t in group.tensors):
            return group
        return group.replace(e.replace(A.to_kind(e.tensor, self.kind)) for e in group.entries)

    def _bind_parameters(self, groups, parameters):
        for g in groups:
            self.validate_inputs([e.id for e in g.entries], g.base.id if g.base else None, group_name=g.metadata.name)
            g.validate_tensors()
        unknown = set(parameters) - {p.name for p in self.spec.parameters}
        if unknown:
            raise TypeError("unknown parameter(s) for %s: %s" % (self.spec.name, ", ".join(sorted(unknown))))
        return [self._bind_group(g, parameters, i, len(groups)) for i, g in enumerate(groups)]

    def _bind_group(self, group, supplied, gi, ng):
        out = {}
        for p in self.spec.parameters:
            if p.name in supplied:
                v = supplied[p.name]
            elif p.scope == ParameterScope.NON_BASE and not group.non_base:
                v = {}
            elif p.required:
                raise TypeError("missing required parameter %s for %s" % (p.name, self.spec.name))
            else:
                v = p.default
            if isinstance(v, PerGroupValues):
                if len(v.values) != ng:
                    raise ValueError("parameter %s expects %d group values; got %d" % (p.name, ng, len(v.values)))
                v = v.values[gi]
            out[p.name] = p.validate(v) if p.scope == ParameterScope.SHARED else self._bind_per_input(group, p, v)
        return out

    @staticmethod
    def _bind_per_input(group, p, value):
        entries = group.non_base if p.scope == ParameterScope.NON_BASE else group.entries
        ids = [e.id for e in entries]
        if isinstance(value, Mapping):
            missing = [k for k in ids if k not in value]
            if missing:
                raise ValueError("missing %s for input(s): %s" % (p.name, missing))
            raw = [value[k] for k in ids]
        elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            if len(value) != len(ids):
                raise ValueError("parameter %s expects %d values; got %d" % (p.name, len(ids), len(value)))
            raw = list(value)
        else:
            raw = [value] * len(ids)
        return PerInputValues([(k, p.validate(v)) for k, v in zip(ids, raw)])

    @abc.abstractmethod
    def _execute(self, groups, parameters, options, input_dtypes, out_dtype):
        """Merge checked groups with bound parameters."""


def _check_result(name, result, expected, kind):
    if not A.is_array(result) or (kind is not None and A.kind_of(result) != kind) or \
            (expected is not None and tuple(result.shape) != tuple(expected)):
        raise TypeError("merge method %s must return a %s of shape %s, not %s" % (
            name, {"torch": "torch tensor", "numpy": "NumPy array"}.get(kind, "tensor"),
            tuple(expected) if expected is not None else None,
            tuple(result.shape) if A.is_array(result) else type(result).__name__))


class GroupMergeMethod(MergeMethod):
    """A method whose kernel gets one group at a time, unpacked."""

    @abc.abstractmethod
    def merge_group(self, group, **parameters):
        ...

    def _execute(self, groups, parameters, options, input_dtypes, out_dtype):
        results = []
        for g, kw, dt in zip(groups, parameters, input_dtypes):
            if g.entries:
                g = g.replace(e.replace(A.cast(e.tensor, dt)) for e in g.entries)
            r = self.merge_group(g, **kw)
            _check_result(self.spec.name, r, g.entries[0].tensor.shape if g.entries else None, self.kind)
            results.append(A.cast(r, out_dtype) if out_dtype else r)
        return tuple(results)


class FunctionalGroupMergeMethod(GroupMergeMethod):
    def __init__(self, spec, implementation, kind=None):
        self.spec, self.implementation, self.kind = spec, implementation, kind

    def merge_group(self, group, **parameters):
        return self.implementation(group, **parameters)


def _coef_dtype(value_type, input_dtype):
    from ._values import strip_annotated
    b, _ = strip_annotated(value_type)
    if b is bool:
        return "bool"
    if b is int:
        return "int64"
    if b is float:
        return "float64" if input_dtype == "float64" else "float32"
    raise TypeError("batch coefficients must be bool, int or float scalars")


class BatchedMergeMethod(MergeMethod):
    """A method with a numerical batch kernel: groups of one shape, dtype,
    input layout and option values are packed into [B, ...] arrays."""

    supports_batching = True

    def __init__(self, spec, implementation, kind=None):
        self.spec, self.implementation, self.kind = spec, implementation, kind

    def merge_batch(self, batch, **parameters):
        """Run the kernel on aligned inputs and coefficients (no binding)."""
        r = self.implementation(batch, **parameters)
        _check_result(self.spec.name, r, batch.tensors[0].shape, self.kind)
        return r

    def _prepare(self, groups, parameters, options, input_dtypes):
        """Chunks of (group index, entries, bound, base_index, dtype)."""
        buckets = {}
        for gi, (g, bound) in enumerate(zip(groups, parameters)):
            entries, base_index = g.entries, None
            if g.base is not None and self.spec.contract.base != BasePolicy.IGNORED:
                entries, base_index = (g.base,) + g.non_base, 0   # base first
            if not entries:
                raise ValueError("numerical batch kernels need at least one input")
            first = entries[0].tensor
            dt = input_dtypes[gi] or A.dtype_name(first)
            nbytes = sum(A.numel(e.tensor) for e in entries) * A.itemsize(dt)
            opts = []
            for p in self.spec.parameters:
                v = bound[p.name]
                if p.batch_tensor:
                    vals = list(v.values()) if p.scope != ParameterScope.SHARED else [v]
                    cdt = _coef_dtype(p.value_type, dt)
                    if cdt == "int64" and any(not -(1 << 63) <= x < (1 << 63) for x in vals):
                        raise ValueError("parameter %s must fit in int64" % p.name)
                    nbytes += len(vals) * A.itemsize(cdt)
                else:
                    try:
                        hash(v)
                    except TypeError:
                        raise TypeError("option %s of a batch kernel must be hashable" % p.name) from None
                    opts.append((p.name, type(v), v))
            item = (gi, entries, bound, base_index, dt, nbytes)
            if len(groups) == 1:
                return [[item]]
            key = (tuple(first.shape), dt, str(getattr(first, "device", "cpu")), len(entries), base_index,
                   tuple(opts))
            buckets.setdefault(key, []).append(item)
        chunks = []
        for items in buckets.values():
            cur, size = [], 0
            for it in items:
                if cur and (size + it[5] > options.max_bytes or len(cur) >= options.max_groups):
                    chunks.append(cur)
                    cur, size = [], 0
                cur.append(it)
                size += it[5]
            if cur:
                chunks.append(cur)
        return chunks

    def _pack(self, chunk):
        first = chunk[0]
        dt = first[4]
        tensors = []
        for srcs in zip(*([e.tensor for e in it[1]] for it in chunk)):
            if len(srcs) == 1:
                tensors.append(A.unsqueeze0(A.cast(srcs[0], dt)))
            else:
                tensors.append(A.stack([A.cast(s, dt) for s in srcs]))
        kw = {}
        for p in self.spec.parameters:
            if not p.batch_tensor:
                kw[p.name] = first[2][p.name]
                continue
            vals = []
            for it in chunk:
                v = it[2][p.name]
                if p.scope != ParameterScope.SHARED:
                    ents = it[1] if p.scope == ParameterScope.INPUT else tuple(e for e in it[1] if not e.is_base)
                    v = v.values_for(ents)
                vals.append(v)
            kw[p.name] = A.new_values(vals, _coef_dtype(p.value_type, dt), tensors[0])
        return TensorBatch(tensors, base_index=first[3]), kw

    def _execute(self, groups, parameters, options, input_dtypes, out_dtype):
        results = [None] * len(groups)
        for chunk in self._prepare(groups, parameters, options, input_dtypes):
            batch, kw = self._pack(chunk)
            merged = self.merge_batch(batch, **kw)
            if out_dtype:
                merged = A.cast(merged, out_dtype)
            for it, r in zip(chunk, A.unbind0(merged)):
                results[it[0]] = r
        return tuple(results)
