"""Whole merges (mergekit.merge's names): run_merge, and merges into
memory (iter_merge, run_merge_in_memory), whose output tensors come back
to Python one by one instead of being written."""
import ctypes
import logging
import os
import threading

from ._lib import _PROGRESS, _SINK, _WARN, _Diags, _Err, _RunOpts, _diag_lines, _load
from .config import MergeConfiguration
from .errors import ConfigError, MergeError
from .options import MergeOptions, _size

log = logging.getLogger("mk")

__all__ = ["run_merge", "MergeOptions", "iter_merge", "run_merge_in_memory"]


def run_merge(merge_config, out_path, options=None, config_source=None):
    """Run the merge into out_path (mergekit's run_merge).  Raises
    ConfigError for a bad configuration, MergeError when the merge fails,
    KeyboardInterrupt after a Ctrl-C (the merge cancelled, no output); an
    exception a merge method written in Python raised is raised again."""
    _run(merge_config, out_path, options, config_source)
    log.info("wrote %s", out_path)


def _model_refs(config):
    """The configuration's model references in order of appearance (models,
    else the slices' sources), for the order Python kernels see."""
    refs = []
    for m in config.models or []:
        refs.append(str(m.model))
    for sl in config.slices or []:
        refs.extend(str(src.model) for src in sl.sources or [])
    return list(dict.fromkeys(refs))


def _as_mergekit_writes(config):
    """The YAML mergekit's run_merge writes into mergekit_config.yml for a
    configuration given as an object or a dict: to_yaml() of the
    configuration as its planner rewrites it first (models and slices
    under modules, each model a slice of all its layers, a base that is
    not among the models added last).  None when the models' layer counts
    cannot be read here (a model not on this machine): to_yaml() then."""
    from .architecture import get_architecture_info
    from .config import InputSliceDefinition, OutputModuleDefinition, OutputSliceDefinition
    import json as _json
    c = config.model_copy(deep=True)
    arch = get_architecture_info(config)
    counts = {}

    def layers(module, ref):
        key = (module, str(ref))
        if key not in counts:
            path = os.path.join(str(ref.model.path), "config.json")
            if ref.lora is not None or ref.model.revision or not os.path.isfile(path):
                raise LookupError(str(ref))
            with open(path) as f:
                counts[key] = arch.modules[module].architecture.num_layers(_json.load(f))
        return counts[key]

    if c.models:
        c.modules = {name: OutputModuleDefinition(models=c.models) for name in arch.modules}
        c.models = None
    if c.slices:
        c.modules = {next(iter(arch.modules)): OutputModuleDefinition(slices=c.slices)}
        c.slices = None
    for name, mod in (c.modules or {}).items():
        if not mod.models:
            continue
        srcs, has_base = [], False
        for m in mod.models:
            has_base |= c.base_model is not None and m.model == c.base_model
            srcs.append(InputSliceDefinition(layer_range=[0, layers(name, m.model)], model=m.model,
                                             parameters=m.parameters))
        if c.base_model is not None and not has_base:
            srcs.append(InputSliceDefinition(layer_range=[0, layers(name, c.base_model)], model=c.base_model))
        mod.slices = [OutputSliceDefinition(sources=srcs)]
        mod.models = None
    return c.to_yaml()


def _run(merge_config, out_path, options, config_source=None, sink=None, stop=None):
    """One merge: into out_path, or into memory through sink (a _SINK
    callback).  stop: a threading.Event that cancels it."""
    from .merge_methods import _bridge
    config = MergeConfiguration.model_validate(merge_config) if isinstance(merge_config, dict) else merge_config
    opt = options or MergeOptions()
    lib = _load()
    if opt.transformers_cache:
        os.environ["HF_HUB_CACHE"] = str(opt.transformers_cache)
    text, label = config._source(config_source)
    if label == "config" and out_path is not None:
        try:
            text = _as_mergekit_writes(config)
        except (LookupError, OSError, ValueError, KeyError) as ex:
            log.debug("mergekit_config.yml: the configuration as given (%s)", ex)
    raw = text.encode()
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
        if (opt.cancel_event is not None and opt.cancel_event.is_set()) or (stop is not None and stop.is_set()):
            cancel.value = 1
        if bar is not None:
            bar.total = total
            bar.update(done - last[0])
        last[0] = done

    cb = _PROGRESS(on_progress)
    # the stages' warnings (an output that became NaN or infinite, ...)
    wcb = _WARN(lambda ctx, msg: log.warning("%s", msg.decode("utf-8", "replace")))
    o = _RunOpts(text=raw, len=len(raw), label=label.encode(),
                 out_dir=os.fsencode(out_path) if out_path is not None else None,
                 out_shard_size=_size(opt.out_shard_size), no_copy_tokenizer=not opt.copy_tokenizer,
                 no_model_card=not opt.write_model_card, allow_crimes=bool(opt.allow_crimes),
                 seed=int(opt.random_seed or 0),
                 cuda=bool(opt.cuda or opt.read_to_gpu or str(opt.device or "").startswith("cuda")), threads=int(opt.num_threads or 0),
                 max_memory=_size(opt.max_memory),
                 spill_dir=os.fsencode(opt.spill) if opt.spill else None, force=bool(opt.force),
                 resume=bool(opt.resume), strict=bool(opt.strict), remote=bool(opt.remote),
                 no_cache=bool(opt.no_cache), progress=cb, cancel=ctypes.pointer(cancel), warn=wcb,
                 buffered=bool(opt.buffered), unsafe_truncate_embeddings=bool(opt.unsafe_truncate_embeddings),
                 quantize=opt.quantize.encode() if opt.quantize else None)
    if opt.lora_merge_dtype:
        dt = ctypes.c_int()
        if lib.mk_config_dtype_parse(str(opt.lora_merge_dtype).encode(), ctypes.byref(dt), None, None):
            raise ValueError("lora_merge_dtype: not a dtype: %r" % opt.lora_merge_dtype)
        o.has_lora_dtype, o.lora_dtype = True, dt.value
    if sink is not None:
        o.sink = sink
    _bridge.set_model_order(_model_refs(config))
    _bridge.take_error()
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
                if (opt.cancel_event is not None and opt.cancel_event.is_set()) or \
                        (stop is not None and stop.is_set()):
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
    kernel_error = _bridge.take_error()
    what = out_path if out_path is not None else "the merge into memory"
    if interrupted:
        raise KeyboardInterrupt("mk: the merge was cancelled; %s was not written" % what)
    if cancel.value and result["rc"]:
        raise MergeError("cancelled: %s was not written" % what)
    if result["rc"]:
        errs = [x for x in lines if x.startswith("error: ")]
        if errs:
            raise ConfigError("\n".join(errs), lines)
        if kernel_error is not None:
            raise kernel_error
        raise MergeError(e.msg.decode("utf-8", "replace"))



# ---- merges into memory

def _tensor_of(name, desc, data, kind):
    """A copy of one output tensor: a torch tensor (kind 'torch') or a NumPy
    array; NumPy has no bfloat16, so a bfloat16 tensor comes as a uint16
    array of its bits there.  The bytes are the written merge's."""
    from .merge_methods import _arrays as A
    from ._lib import _DT_NAME
    np = A.np()
    dn = _DT_NAME.get(desc.dtype)
    if dn is None:
        raise MergeError("tensor %s: dtype %d has no NumPy or torch equivalent" % (name, desc.dtype))
    shape = tuple(int(desc.shape[i]) for i in range(desc.ndim))
    npdt = np.dtype("uint16" if dn == "bfloat16" else dn)
    n = 1
    for s in shape:
        n *= s
    nbytes = n * npdt.itemsize
    arr = np.frombuffer(ctypes.string_at(data, nbytes) if nbytes else b"", dtype=npdt).reshape(shape).copy()
    if kind == "torch":
        import torch
        t = torch.from_numpy(arr)
        return t.view(torch.bfloat16) if dn == "bfloat16" else t
    return arr


def _desc(p):
    from ._lib import _Desc
    return ctypes.cast(p, ctypes.POINTER(_Desc)).contents


def _err(p):
    return ctypes.cast(p, ctypes.POINTER(_Err)).contents


def _kind(tensor_type):
    from .merge_methods import _arrays as A
    if tensor_type is None:
        return "torch" if A.torch_or_none() is not None else "numpy"
    if tensor_type not in ("torch", "numpy"):
        raise ValueError("tensor_type: 'torch' or 'numpy', not %r" % (tensor_type,))
    return tensor_type


def run_merge_in_memory(merge_config, callback, options=None, tensor_type=None):
    """Merge without writing anything: callback(name, tensor) is called for
    each output tensor as it is complete (in the order they complete, from
    a merge thread, one call at a time), with a tensor of the same bytes
    as run_merge writes.  tensor_type: 'torch', 'numpy' or None (torch
    when installed).  Memory: the merge's budget (MergeOptions.max_memory)
    plus the tensors being assembled, each held whole.  An exception the
    callback raises stops the merge and is raised again here."""
    kind = _kind(tensor_type)
    failed = []

    def sink(ctx, name, descp, data, errp):
        try:
            callback(name.decode(), _tensor_of(name.decode(), _desc(descp), data, kind))
            return 0
        except BaseException as ex:
            failed.append(ex)
            _err(errp).code = 1
            _err(errp).msg = ("stopped by the callback: %s: %s" % (type(ex).__name__, ex)).encode()[:1000]
            return -1

    try:
        _run(merge_config, None, options, sink=_SINK(sink))
    except MergeError:
        if failed:
            raise failed[0]
        raise


def iter_merge(merge_config, options=None, tensor_type=None):
    """Merge without writing anything, as an iterator of (name, tensor) in
    the order the tensors complete (see run_merge_in_memory).  The merge
    runs on a thread of its own and waits while a tensor is not taken, so
    at most one finished tensor waits here; leaving the loop early (or
    closing the iterator) cancels the merge."""
    import queue
    kind = _kind(tensor_type)
    q = queue.Queue(maxsize=1)
    stop = threading.Event()
    done = object()
    outcome = {}

    def sink(ctx, name, descp, data, errp):
        t = _tensor_of(name.decode(), _desc(descp), data, kind)
        while not stop.is_set():
            try:
                q.put((name.decode(), t), timeout=0.1)
                return 0
            except queue.Full:
                continue
        _err(errp).code = 1
        _err(errp).msg = b"the iterator was closed"
        return -1

    cb = _SINK(sink)

    def work():
        try:
            _run(merge_config, None, options, sink=cb, stop=stop)
        except BaseException as ex:
            outcome["error"] = ex
        finally:
            while True:
                try:
                    q.put(done, timeout=0.1)
                    break
                except queue.Full:
                    if stop.is_set():
                        try:
                            q.get_nowait()
                        except queue.Empty:
                            pass

    t = threading.Thread(target=work, name="mk iter_merge")
    t.start()
    try:
        while True:
            item = q.get()
            if item is done:
                break
            yield item
    finally:
        stop.set()
        while t.is_alive():
            try:
                q.get(timeout=0.1)
            except queue.Empty:
                pass
        t.join()
    if "error" in outcome and not (stop.is_set() and isinstance(outcome["error"], MergeError) and
                                   "cancelled" in str(outcome["error"])):
        raise outcome["error"]
