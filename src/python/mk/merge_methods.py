"""mergekit.merge_methods' names, for code that imports them from there."""
from . import (BatchOptions, Method, PerGroupValues, TensorGroup, get, merge_state_dicts,  # noqa: F401
               merge_tensors, methods)

__all__ = ["BatchOptions", "Method", "PerGroupValues", "TensorGroup", "get", "merge_state_dicts", "merge_tensors",
           "methods"]
