"""Merge methods (mergekit.merge_methods' names): the method API to
define methods in Python, the registry, and merging tensors in memory
with any method (merge_tensors, merge_state_dicts, a method object called
on TensorGroups)."""
from ._builtin import BuiltinMethod, methods
from .api import merge_state_dicts, merge_tensors
from .base import (BasePolicy, BatchedMergeMethod, BatchOptions, BatchParameter, FunctionalGroupMergeMethod,
                   GroupMergeMethod, InputContract, MergeMethod, MergeMethodSpec, OptionalTensorPolicy,
                   ParameterScope, ParameterSpec, PerGroupValues, PerInput, PerInputValues, PerNonBase,
                   TensorBatch, TensorEntry, TensorGroup, TensorMetadata)
from .easy_define import merge_method
from .registry import UnknownMethodError, get, register, registered_methods

Method = BuiltinMethod   # mk's earlier name for a libmk method object

__all__ = ["BasePolicy", "BatchedMergeMethod", "BatchOptions", "BatchParameter", "BuiltinMethod",
           "FunctionalGroupMergeMethod", "GroupMergeMethod", "InputContract", "MergeMethod", "MergeMethodSpec",
           "Method", "OptionalTensorPolicy", "ParameterScope", "ParameterSpec", "PerGroupValues", "PerInput",
           "PerInputValues", "PerNonBase", "TensorBatch", "TensorEntry", "TensorGroup", "TensorMetadata",
           "UnknownMethodError", "get", "merge_method", "merge_state_dicts", "merge_tensors", "methods",
           "register", "registered_methods"]
