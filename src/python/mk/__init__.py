"""mk: model merging for large language models, from Python.

A thin layer over libmk (loaded with ctypes, so nothing is compiled when
the package is installed).  The names follow mergekit's Python API, so code
written for it changes only its imports::

    import mk
    config = mk.MergeConfiguration.model_validate({
        "merge_method": "slerp",
        "base_model": "org/base",
        "models": [{"model": "org/base"}, {"model": "org/tuned"}],
        "parameters": {"t": 0.3},
        "dtype": "bfloat16",
    })
    mk.run_merge(config, "out", options=mk.MergeOptions(copy_tokenizer=True))

The merge runs inside this process (mk_run_merge(3)): the same bytes as
``mk-yaml CONFIG OUT``.  Progress goes to the ``mk`` logger (and to a tqdm
bar when tqdm is installed and ``MergeOptions(quiet=False)``); Ctrl-C
cancels the merge and leaves no output directory.

libmk.so is looked for in $MK_LIB, then beside this package (an installed
tree: PREFIX/lib/libmk.so.0), then by the system's loader.

mergekit's other modules have their mk names: mk.merge, mk.options,
mk.config, mk.architecture, mk.card, mk.sparsify (numpy), mk.merge_methods.
``mk.__version__`` is the package's version, libmk's (``libmk_version()``
asks the library loaded).
"""
import logging

from ._describe import libmk_version
from ._version import __version__
from .config import MergeConfiguration, validate
from .errors import ConfigError, MergeError
from .merge import iter_merge, run_merge, run_merge_in_memory
from .merge_methods import (BatchOptions, Method, PerGroupValues, TensorGroup, get, merge_state_dicts,
                            merge_tensors, methods)
from .options import MergeOptions

__all__ = ["MergeConfiguration", "MergeOptions", "MergeError", "ConfigError", "run_merge", "validate",
           "merge_tensors", "merge_state_dicts", "methods", "BatchOptions", "TensorGroup", "PerGroupValues",
           "Method", "get", "iter_merge", "run_merge_in_memory", "libmk_version", "__version__"]

log = logging.getLogger("mk")
