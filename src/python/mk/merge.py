"""Whole merges (mergekit.merge's names): run_merge."""
import ctypes
import logging
import os
import threading

from ._lib import _PROGRESS, _WARN, _Diags, _Err, _RunOpts, _diag_lines, _load
from .config import MergeConfiguration
from .errors import ConfigError, MergeError
from .options import MergeOptions, _size

log = logging.getLogger("mk")

__all__ = ["run_merge", "MergeOptions"]


def run_merge(merge_config, out_path, options=None, config_source=None):
    """Run the merge into out_path (mergekit's run_merge).  Raises
    ConfigError for a bad configuration, MergeError when the merge fails,
    KeyboardInterrupt after a Ctrl-C (the merge cancelled, no output)."""
    config = MergeConfiguration.model_validate(merge_config) if isinstance(merge_config, dict) else merge_config
    opt = options or MergeOptions()
    lib = _load()
    if opt.transformers_cache:
        os.environ["HF_HUB_CACHE"] = str(opt.transformers_cache)
    raw = config._text.encode()
    cancel = ctypes.c_int(0)
    bar = None
    if not opt.quiet:
        try:
            import tqdm
            bar = tqdm.tqdm(unit="B", unit_scale=True, desc="mk")
        except ImportError:
            bar = None
    last = [0]

    def on_progress(ctx, done, total, tdone, ntensors):
        log.debug("%d/%d bytes, %d/%d tensors", done, total, tdone, ntensors)
        if opt.progress_callback is not None:
            opt.progress_callback(done, total, tdone, ntensors)
        if opt.cancel_event is not None and opt.cancel_event.is_set():
            cancel.value = 1
        if bar is not None:
            bar.total = total
            bar.update(done - last[0])
        last[0] = done

    cb = _PROGRESS(on_progress)
    # the stages' warnings (an output that became NaN or infinite, ...)
    wcb = _WARN(lambda ctx, msg: log.warning("%s", msg.decode("utf-8", "replace")))
    o = _RunOpts(text=raw, len=len(raw), label=config._label.encode(), out_dir=os.fsencode(out_path),
                 out_shard_size=_size(opt.out_shard_size), no_copy_tokenizer=not opt.copy_tokenizer,
                 no_model_card=not opt.write_model_card, allow_crimes=bool(opt.allow_crimes),
                 seed=int(opt.random_seed or 0), cuda=bool(opt.cuda), threads=int(opt.num_threads or 0),
                 max_memory=_size(opt.max_memory),
                 spill_dir=os.fsencode(opt.spill) if opt.spill else None, force=bool(opt.force),
                 resume=bool(opt.resume), strict=bool(opt.strict), remote=bool(opt.remote),
                 no_cache=bool(opt.no_cache), progress=cb, cancel=ctypes.pointer(cancel), warn=wcb,
                 buffered=bool(opt.buffered), unsafe_truncate_embeddings=bool(opt.unsafe_truncate_embeddings))
    if opt.lora_merge_dtype:
        dt = ctypes.c_int()
        if lib.mk_config_dtype_parse(str(opt.lora_merge_dtype).encode(), ctypes.byref(dt), None, None):
            raise ValueError("lora_merge_dtype: not a dtype: %r" % opt.lora_merge_dtype)
        o.has_lora_dtype, o.lora_dtype = True, dt.value
    d, e = _Diags(), _Err()
    result = {}

    ended = threading.Event()

    def work():  # ctypes lets go of the GIL: the main thread stays free for Ctrl-C
        try:
            result["rc"] = lib.mk_run_merge(ctypes.byref(o), ctypes.byref(d), ctypes.byref(e))
        finally:
            ended.set()

    t = threading.Thread(target=work, name="mk_run_merge")
    t.start()
    interrupted = False
    # a Ctrl-C may come at any line: the merge is waited for until it ends
    # (on an Event: a join interrupted by KeyboardInterrupt can report a
    # thread still running as stopped)
    while True:
        try:
            while not ended.wait(0.1):
                if opt.cancel_event is not None and opt.cancel_event.is_set():
                    cancel.value = 1
            break
        except KeyboardInterrupt:
            cancel.value = 1
            interrupted = True
    t.join()
    if bar is not None:
        bar.close()
    lines = _diag_lines(lib, d)
    lib.mk_diags_free(ctypes.byref(d))
    if interrupted:
        raise KeyboardInterrupt("mk: the merge was cancelled; %s was not written" % out_path)
    if cancel.value and result["rc"]:
        raise MergeError("cancelled: %s was not written" % out_path)
    if result["rc"]:
        errs = [x for x in lines if x.startswith("error: ")]
        if errs:
            raise ConfigError("\n".join(errs), lines)
        raise MergeError(e.msg.decode("utf-8", "replace"))
    log.info("wrote %s", out_path)

