"""Defining merge methods from annotated Python functions
(mergekit.merge_methods.easy_define's names).

merge_method(kernel, name=...) or @merge_method(name=...) makes a method
whose form the kernel's first annotation chooses:

  TensorGroup   a group kernel: one output's inputs at a time; options are
                ordinary annotations, per-input values PerInput[T] or
                PerNonBase[T] mappings keyed by the inputs' ids;
  TensorBatch   a batch kernel: inputs shaped [B, ...]; coefficients are
                Annotated[Tensor, BatchParameter(T, scope)] arrays, other
                (hashable) options constant within a batch;
  List[Tensor]  mergekit's older form (its "create a merge method" guide):
                tensors, an optional base_tensor, List[float]/List[int]
                per-model values, output_weight and base_model filled in;
                such a method registers itself when defined.

The return annotation says which arrays the kernel works on: torch.Tensor
or numpy.ndarray.  elementwise=True (mk's) says each output element
depends only on the same element of the inputs: a YAML merge then calls
the kernel on pieces of each tensor (1-D) instead of holding the tensor
whole, which bounds its memory by the merge's chunks.  Everything is checked when the method is defined:
unannotated parameters, ambiguous or unsupported annotations are refused.
"""
import inspect
import typing

from . import _arrays as A
from ._values import Annotated, get_args, get_origin, strip_annotated
from .base import (MISSING, BasePolicy, BatchedMergeMethod, BatchParameter, FunctionalGroupMergeMethod,
                   GroupMergeMethod, InputContract, MergeMethodSpec, OptionalTensorPolicy, ParameterScope,
                   ParameterSpec, PerInputValues, TensorBatch, TensorGroup)

__all__ = ["merge_method"]

_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _is_tensor_type(tp):
    return A.annotation_kind(tp) is not None


def _parameter(arg, ann, batched):
    if arg.kind not in _KEYWORD:
        raise TypeError("parameter %s must accept keyword arguments" % arg.name)
    if ann is inspect.Parameter.empty:
        raise TypeError("parameter %s must have a type annotation" % arg.name)
    value_type, meta = ann, []
    if get_origin(ann) is Annotated:
        value_type, *meta = get_args(ann)
    markers = [m for m in meta if isinstance(m, (ParameterScope, BatchParameter))]
    if len(markers) > 1:
        raise TypeError("parameter %s has more than one scope annotation" % arg.name)
    marker = markers[0] if markers else None
    rest = [m for m in meta if m is not marker]
    scope = ParameterScope.SHARED
    if isinstance(marker, BatchParameter):
        if not batched:
            raise TypeError("parameter %s: group kernels take PerInput[T] or PerNonBase[T], not BatchParameter"
                            % arg.name)
        if not _is_tensor_type(value_type) or rest:
            raise TypeError("parameter %s: BatchParameter annotates a tensor; put the value's constraints inside "
                            "BatchParameter(value_type)" % arg.name)
        value_type = marker.value_type
        if strip_annotated(value_type)[0] not in (float, int, bool):
            raise TypeError("parameter %s: BatchParameter needs a bool, int or float scalar type" % arg.name)
        scope = marker.scope
    elif isinstance(marker, ParameterScope):
        if batched:
            raise TypeError("parameter %s: batch kernels take BatchParameter, not PerInput[T] or PerNonBase[T]"
                            % arg.name)
        if get_origin(value_type) is not PerInputValues or rest or marker == ParameterScope.SHARED:
            raise TypeError("parameter %s: put per-input constraints inside PerInput[T]" % arg.name)
        value_type = get_args(value_type)[0]
        scope = marker
    else:
        if _is_tensor_type(value_type):
            raise TypeError("parameter %s: tensor coefficients must be annotated with BatchParameter" % arg.name)
        if value_type is PerInputValues or get_origin(value_type) is PerInputValues:
            raise TypeError("parameter %s: per-input values must use PerInput[T] or PerNonBase[T]" % arg.name)
        value_type = ann   # ordinary Annotated metadata (constraints) kept
    return ParameterSpec(arg.name, value_type, scope,
                         MISSING if arg.default is inspect.Parameter.empty else arg.default,
                         batch_tensor=isinstance(marker, BatchParameter))


def _kind_of_return(hints):
    kind = A.annotation_kind(hints.get("return"))
    if kind is None:
        raise TypeError("a merge kernel's return annotation must be torch.Tensor or numpy.ndarray")
    return kind


def _is_tensor_list(tp):
    return get_origin(tp) in (list, typing.List, tuple) and get_args(tp) and _is_tensor_type(get_args(tp)[0])


def _method_from_function(func, name=None, pretty_name=None, reference_url=None, contract=None,
                          optional_tensor_policy=OptionalTensorPolicy.ERROR, uses_accelerator=True,
                          elementwise=False):
    if not name:
        raise TypeError("merge_method needs a name=")
    args = list(inspect.signature(func).parameters.values())
    hints = typing.get_type_hints(func, include_extras=True)
    first = hints.get(args[0].name) if args else None
    if args and args[0].name == "tensors" and _is_tensor_list(first):
        return _legacy(func, args, hints, name, pretty_name, reference_url, elementwise)
    if first not in (TensorBatch, TensorGroup):
        raise TypeError("the kernel's first argument must be annotated TensorBatch or TensorGroup "
                        "(or tensors: List[torch.Tensor], mergekit's older form)")
    if args[0].kind not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
        raise TypeError("the kernel's first argument must accept a positional value")
    kind = _kind_of_return(hints)
    batched = first is TensorBatch
    spec = MergeMethodSpec(name, [_parameter(a, hints.get(a.name, inspect.Parameter.empty), batched)
                                  for a in args[1:]], contract or InputContract(), pretty_name, reference_url,
                           optional_tensor_policy, uses_accelerator, elementwise)
    return (BatchedMergeMethod if batched else FunctionalGroupMergeMethod)(spec, func, kind)


def merge_method(func=None, **spec_options):
    """Make a method of a kernel, directly (merge_method(kernel, name=...))
    or as a decorator (@merge_method(name=...)).  The method is not
    registered (register() makes it usable by name), except in the older
    List[Tensor] form, which registers itself as mergekit's did."""
    if func is None:
        return lambda f: _method_from_function(f, **spec_options)
    return _method_from_function(func, **spec_options)


# ---- mergekit's older decorator form

class _WeightInfo:
    """What output_weight carries in the older form: the output's name."""

    def __init__(self, name, vocabulary_axis=None):
        self.name, self.vocabulary_axis = name, vocabulary_axis

    def __repr__(self):
        return "WeightInfo(name=%r)" % self.name


class LegacyMergeMethod(GroupMergeMethod):
    """A method of the older form: tensors (and base_tensor) as lists."""

    def __init__(self, spec, func, kind, has_base_tensor, vectors, wants_weight, wants_base_model):
        self.spec, self.implementation, self.kind = spec, func, kind
        self.has_base_tensor, self.vectors = has_base_tensor, vectors
        self.wants_weight, self.wants_base_model = wants_weight, wants_base_model

    def merge_group(self, group, **parameters):
        base = group.base
        if self.has_base_tensor:
            entries = group.non_base
        else:   # the base, when there is one, first
            entries = ((base,) if base is not None else ()) + group.non_base
        kw = {}
        for k, v in parameters.items():
            kw[k] = v.values_for(entries) if k in self.vectors else v
        if self.has_base_tensor:
            kw["base_tensor"] = base.tensor if base is not None else None
        if self.wants_weight:
            kw["output_weight"] = _WeightInfo(group.metadata.name, group.metadata.vocabulary_axis)
        if self.wants_base_model:
            kw["base_model"] = base.id if base is not None else None
        return self.implementation([e.tensor for e in entries], **kw)


def _optional_of(tp):
    """(inner type, whether Optional[...])."""
    if get_origin(tp) is typing.Union and type(None) in get_args(tp):
        inner = [a for a in get_args(tp) if a is not type(None)]
        return (inner[0] if len(inner) == 1 else tp), True
    return tp, False


def _legacy(func, args, hints, name, pretty_name, reference_url, elementwise=False):
    kind = _kind_of_return(hints)
    has_base, base_optional = False, False
    params, vectors = [], set()
    wants_weight = wants_base_model = False
    for a in args[1:]:
        ann = hints.get(a.name, inspect.Parameter.empty)
        if a.name == "base_tensor":
            inner, base_optional = _optional_of(ann)
            if not _is_tensor_type(inner):
                raise TypeError("base_tensor must be annotated torch.Tensor or Optional[torch.Tensor]")
            has_base = True
            continue
        if a.name == "output_weight":
            wants_weight = True
            continue
        if a.name == "base_model":
            wants_base_model = True
            continue
        if ann is inspect.Parameter.empty:
            raise TypeError("parameter %s must have a type annotation" % a.name)
        default = MISSING if a.default is inspect.Parameter.empty else a.default
        if get_origin(ann) in (list, typing.List):
            inner = get_args(ann)[0] if get_args(ann) else None
            if inner not in (float, int):
                raise TypeError("parameter %s: vector parameters are List[float] or List[int]" % a.name)
            if isinstance(default, (list, tuple)):
                raise TypeError("parameter %s: a vector parameter's default is one number, broadcast" % a.name)
            vectors.add(a.name)
            params.append(ParameterSpec(a.name, inner, ParameterScope.NON_BASE if has_base or
                                        _later_base(args) else ParameterScope.INPUT, default))
        elif strip_annotated(ann)[0] in (bool, int, float):
            params.append(ParameterSpec(a.name, ann, ParameterScope.SHARED, default))
        else:
            raise TypeError("parameter %s: scalar parameters are bool, int or float" % a.name)
    policy = BasePolicy.IGNORED if not has_base else BasePolicy.OPTIONAL if base_optional else BasePolicy.REQUIRED
    spec = MergeMethodSpec(name, params, InputContract(base=policy), pretty_name, reference_url,
                           elementwise=elementwise)
    method = LegacyMergeMethod(spec, func, kind, has_base, vectors, wants_weight, wants_base_model)
    from .registry import register
    register(method)
    return method


def _later_base(args):
    return any(a.name == "base_tensor" for a in args)
