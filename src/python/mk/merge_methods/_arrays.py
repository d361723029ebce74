"""Arrays of either kind a Python kernel works on: NumPy arrays (always)
and torch tensors (when torch is installed).  Conversions share memory
where the dtype allows (torch.from_numpy, Tensor.numpy)."""


def kind_of(x):
    return "torch" if type(x).__module__.startswith("torch") else "numpy"


def torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


def np():
    import numpy
    return numpy


def annotation_kind(tp):
    """'torch' for torch.Tensor, 'numpy' for numpy.ndarray, else None."""
    mod = getattr(tp, "__module__", "") or ""
    name = getattr(tp, "__name__", "")
    if mod.startswith("torch") and name == "Tensor":
        return "torch"
    if mod.startswith("numpy") and name == "ndarray":
        return "numpy"
    return None


def is_array(x):
    if kind_of(x) == "torch":
        return hasattr(x, "dtype") and hasattr(x, "shape")
    return isinstance(x, np().ndarray)


def dtype_name(x):
    return str(x.dtype).replace("torch.", "")


def to_kind(x, kind):
    """x as an array of `kind`, without a copy where possible."""
    if kind_of(x) == kind:
        return x
    if kind == "torch":
        torch = torch_or_none()
        if torch is None:
            raise TypeError("mk: this kernel works on torch tensors, and torch is not installed")
        a = np().asarray(x)
        return torch.from_numpy(a) if a.flags.writeable else torch.from_numpy(a.copy())
    t = x.detach()
    if str(t.dtype) == "torch.bfloat16":
        raise TypeError("mk: a NumPy kernel cannot take bfloat16 tensors (NumPy has no bfloat16); "
                        "give dtype='float32'")
    return t.cpu().numpy()


def dtype_of(name, kind):
    if kind == "torch":
        return getattr(torch_or_none(), name)
    return np().dtype(name)


def is_float(x):
    return dtype_name(x) in ("float16", "bfloat16", "float32", "float64")


def promote(arrays):
    """The dtype name torch (or NumPy) promotes these arrays' dtypes to."""
    kind = kind_of(arrays[0])
    if kind == "torch":
        torch = torch_or_none()
        dt = arrays[0].dtype
        for a in arrays[1:]:
            dt = torch.promote_types(dt, a.dtype)
        return str(dt).replace("torch.", "")
    return np().result_type(*arrays).name


def cast(x, name):
    if dtype_name(x) == name:
        return x
    if kind_of(x) == "torch":
        return x.to(dtype=dtype_of(name, "torch"))
    if name == "bfloat16":
        raise TypeError("mk: NumPy has no bfloat16; use torch tensors or another dtype")
    return x.astype(name)


def stack(arrays):
    if kind_of(arrays[0]) == "torch":
        return torch_or_none().stack(list(arrays))
    return np().stack(list(arrays))


def unsqueeze0(x):
    return x.unsqueeze(0) if kind_of(x) == "torch" else x[None, ...]


def unbind0(x):
    return list(x.unbind(0)) if kind_of(x) == "torch" else [x[i] for i in range(x.shape[0])]


def new_values(values, name, like):
    """An array of `values` (nested lists) of dtype `name`, of like's kind."""
    if kind_of(like) == "torch":
        torch = torch_or_none()
        return torch.tensor(values, dtype=dtype_of(name, "torch"), device=like.device)
    return np().array(values, dtype=name)


def numel(x):
    n = 1
    for s in x.shape:
        n *= int(s)
    return n


def itemsize(name):
    return {"bool": 1, "uint8": 1, "int8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2, "int32": 4,
            "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8}.get(name, 8)


def same_device(arrays):
    if kind_of(arrays[0]) != "torch":
        return True
    return all(a.device == arrays[0].device for a in arrays)
