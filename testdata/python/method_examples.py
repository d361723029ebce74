"""The method API's examples, written once for either package: define(mm)
takes a merge_methods module (mk.merge_methods or mergekit's) and returns
the methods, unregistered.  Used by test/python/test_python_methods.py
(NumPy kernels) and scripts/python-methods-conformance (torch kernels,
against mergekit)."""
from typing import Annotated, List, Optional


def define(mm, xp):
    """mm: a merge_methods module; xp: 'torch' or 'numpy' (the kernels'
    arrays)."""
    if xp == "torch":
        import torch
        Tensor = torch.Tensor

        def zeros_like(x, dtype):
            return torch.zeros_like(x, dtype=dtype)

        def wide(x):
            return torch.float64 if x.dtype == torch.float64 else torch.float32

        def cast(x, dt):
            return x.to(dt)

        def columns(w):
            return w.unbind(1)
    else:
        import numpy as np
        Tensor = np.ndarray

        def zeros_like(x, dtype):
            return np.zeros_like(x, dtype=dtype)

        def wide(x):
            return np.float64 if x.dtype == np.float64 else np.float32

        def cast(x, dt):
            return x.astype(dt)

        def columns(w):
            return [w[:, i] for i in range(w.shape[1])]

    def scaled_copy(group: mm.TensorGroup, scale: float = 1.0) -> Tensor:
        return group.tensors[0] * scale

    def weighted_average(batch: mm.TensorBatch,
                         weight: Annotated[Tensor, mm.BatchParameter(float, mm.ParameterScope.INPUT)],
                         normalize: bool = True) -> Tensor:
        first = batch.tensors[0]
        shape = (first.shape[0],) + (1,) * (first.ndim - 1)
        dt = wide(first)
        w = cast(weight, dt)
        result = zeros_like(first, dt)
        for t, c in zip(batch.tensors, columns(w)):
            result = result + t * c.reshape(shape)
        if normalize:
            result = result / w.sum(1).reshape(shape)
        return cast(result, first.dtype)

    def base_interpolation(batch: mm.TensorBatch,
                           t: Annotated[Tensor, mm.BatchParameter(float)]) -> Tensor:
        a, b = batch.tensors
        t = t.reshape((t.shape[0],) + (1,) * (a.ndim - 1))
        return (1 - t) * a + t * b

    def per_input_scale(group: mm.TensorGroup, gain: mm.PerInput[float], bias: float = 0.0) -> Tensor:
        # a group kernel with a per-input mapping keyed by the inputs' ids
        out = None
        for e in group.entries:
            term = e.tensor * gain[e.id]
            out = term if out is None else out + term
        return out + bias

    return {
        "scaled_copy": mm.merge_method(scaled_copy, name="scaled_copy"),
        "weighted_average": mm.merge_method(weighted_average, name="weighted_average",
                                            pretty_name="Weighted Average"),
        "base_interpolation": mm.merge_method(base_interpolation, name="base_interpolation",
                                              contract=mm.InputContract(base=mm.BasePolicy.REQUIRED,
                                                                        min_inputs=2, max_inputs=2)),
        "per_input_scale": mm.merge_method(per_input_scale, name="per_input_scale"),
    }


def define_legacy(merge_method, xp, suffix=""):
    """mergekit's older form (it registers itself): a weighted average
    with a base."""
    if xp == "torch":
        import torch
        Tensor = torch.Tensor
    else:
        import numpy as np
        Tensor = np.ndarray

    @merge_method(name="legacy_average" + suffix, pretty_name="Legacy Average")
    def legacy_average(tensors: List[Tensor], base_tensor: Optional[Tensor], weight: List[float],
                       normalize: bool = True) -> Tensor:
        if normalize:
            total = sum(weight)
            weight = [w / total for w in weight]
        out = sum(t * w for t, w in zip(tensors, weight))
        return out if base_tensor is None else out * 0.5 + base_tensor * 0.5

    return legacy_average
