"""Merge options (mergekit.options' names)."""
import logging
import warnings

log = logging.getLogger("mk")


class MergeOptions:
    """mergekit's MergeOptions names that mean something to mk; any other
    is accepted with a warning (it changes nothing)."""

    _KNOWN = {
        "cuda": False, "random_seed": None, "out_shard_size": None, "copy_tokenizer": True,
        "write_model_card": True, "allow_crimes": False, "max_memory": None, "num_threads": None,
        "spill": None, "force": False, "resume": False, "strict": False, "remote": False,
        "no_cache": False, "lora_merge_dtype": None, "transformers_cache": None, "quiet": False,
        # mk's: called as progress_callback(bytes_done, bytes_total,
        # tensors_done, ntensors) from the merge's thread; cancel_event (a
        # threading.Event) set from anywhere stops the merge, no output
        "progress_callback": None, "cancel_event": None,
        # mk's: write the output through the page cache, not O_DIRECT
        "buffered": False,
    }
    # mergekit's own, meaningless to mk
    _IGNORED = {"lazy_unpickle", "low_cpu_memory", "clone_tensors", "trust_remote_code", "read_to_gpu",
                "multi_gpu", "gpu_rich", "async_write", "safe_serialization", "write_threads", "device",
                "lora_merge_cache", "verbose"}

    def __init__(self, **kw):
        for k, v in self._KNOWN.items():
            setattr(self, k, v)
        for k, v in kw.items():
            if k in self._KNOWN:
                setattr(self, k, v)
            elif k in self._IGNORED:
                log.info("MergeOptions: %s means nothing to mk; ignored", k)
            else:
                warnings.warn("MergeOptions: unknown option %r ignored" % k, stacklevel=2)


def _size(v):
    if v is None:
        return 0
    if isinstance(v, int):
        return v
    s = str(v).strip()
    units = {"k": 1000, "m": 1000 ** 2, "g": 1000 ** 3, "t": 1000 ** 4, "b": 1000 ** 3,
             "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
    num = s.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    unit = s[len(num):].lower()
    if unit not in units and unit:
        raise ValueError("not a size: %r" % v)
    return int(float(num) * units.get(unit, 1))
