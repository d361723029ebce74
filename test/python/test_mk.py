"""The Python package (src/python/mk) over libmk: configurations validated
with every diagnostic, run_merge writing what mk-yaml writes, a wrapper in
the style frameworks use (validate, merge, skip an existing output,
reload), cancel leaving no output, MergeOptions' names.  Run by
test/cli/python.sh in the repository's root with MK_LIB and MK_BIN set."""
import filecmp
import json
import os
import signal
import struct
import subprocess
import threading
import time

import numpy as np  # Debian's python3-numpy (make deps)
import pytest
import yaml  # Debian's python3-yaml

import mk

TOP = os.getcwd()
BIN = os.environ["MK_BIN"]
A, B = (os.path.join(TOP, "testdata/models", m) for m in ("tiny-a", "tiny-b"))


def slerp(t=0.3):
    return {"merge_method": "slerp", "base_model": A, "models": [{"model": A}, {"model": B}],
            "parameters": {"t": t}, "dtype": "bfloat16"}


def tensors(path):
    """name -> (dtype, shape, bytes) of a safetensors file, by hand."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    return {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}


def same_dirs(a, b):
    c = filecmp.dircmp(a, b)
    assert not c.left_only and not c.right_only, (c.left_only, c.right_only)
    _, bad, errs = filecmp.cmpfiles(a, b, c.common_files, shallow=False)
    assert not bad and not errs, (bad, errs)


def test_validation_lists_every_error():
    # two models missing and a misspelt parameter: all three said by the
    # planner (mk.validate), each at its line and column of the YAML it read
    bad = {"merge_method": "linear", "models": [
        {"model": A, "parameters": {"wieght": 1}},
        {"model": "/nonexistent/m1", "parameters": {"weight": 1}},
        {"model": "/nonexistent/m2", "parameters": {"weight": 1}}]}
    mk.MergeConfiguration.model_validate(bad)  # structurally sound
    with pytest.raises(mk.ConfigError) as e:
        mk.validate(bad)
    d = e.value.diagnostics
    errs = [x for x in d if x.startswith("error: ")]
    assert len(errs) == 2 and "m1" in errs[0] and "m2" in errs[1], d
    assert any(x.startswith("warning: ") and "wieght" in x and "did you mean 'weight'" in x for x in d), d
    assert all(x.split(": ", 1)[1].split(":")[0] == "config" and x.split(":")[2].isdigit() for x in d), d
    assert "m1" in str(e.value) and "m2" in str(e.value)


def test_validation_of_a_missing_model():
    c = mk.MergeConfiguration.model_validate({"merge_method": "linear", "models": [
        {"model": "/nonexistent/no-such-model", "parameters": {"weight": 1}}]})
    with pytest.raises(mk.ConfigError, match="no-such-model"):
        mk.validate(c)


def test_good_config_validates():
    c = mk.MergeConfiguration.model_validate(slerp())
    assert mk.MergeConfiguration.model_validate(c) is c
    assert not [x for x in mk.validate(c) if x.startswith("error: ")]
    assert yaml.safe_load(c.to_yaml())["merge_method"] == "slerp"


CONFIGS = sorted(os.path.join("testdata/configs", f) for f in os.listdir("testdata/configs") if f.endswith(".yml"))
CONFIGS += sorted(os.path.join("test/conformance", f) for f in os.listdir("test/conformance") if f.endswith(".yml"))


@pytest.mark.parametrize("cfg", CONFIGS, ids=[os.path.basename(c) for c in CONFIGS])
def test_run_merge_writes_what_mk_yaml_writes(cfg, tmp_path):
    text = open(cfg).read()
    a, b = tmp_path / "py" / "out", tmp_path / "yaml" / "out"
    a.parent.mkdir()
    b.parent.mkdir()
    mk.run_merge(mk.MergeConfiguration.from_yaml(text, cfg), str(a), options=mk.MergeOptions(quiet=True))
    # the same OpenBLAS kernels as this process (numpy may have loaded
    # OpenBLAS before mk could choose them): matrix products (a LoRA's
    # B.A) round as their kernels do (mk_run_merge(3))
    env = dict(os.environ, OPENBLAS_CORETYPE=blas_core())
    subprocess.run([os.path.join(BIN, "mk-yaml"), "--quiet", cfg, str(b)], check=True, env=env)
    same_dirs(str(a), str(b))


def blas_core():
    """The OpenBLAS kernels this process runs (libmk's OpenBLAS)."""
    import ctypes
    f = ctypes.CDLL(os.environ["MK_LIB"]).openblas_get_corename
    f.restype = ctypes.c_char_p
    return f().decode()


def test_options_reach_the_merge(tmp_path):
    out = tmp_path / "out"
    mk.run_merge(slerp(), str(out), options=mk.MergeOptions(out_shard_size="20K", write_model_card=False,
                                                            copy_tokenizer=False, max_memory="64MiB",
                                                            num_threads=1, quiet=True))
    names = sorted(os.listdir(out))
    assert "README.md" not in names and "tokenizer.json" not in names
    assert "model.safetensors.index.json" in names and len([n for n in names if n.endswith(".safetensors")]) > 1


def test_buffered_writes_the_same(tmp_path):
    # mk's buffered=True (mk-pack --buffered, the last field of the
    # options struct): the same bytes as the default O_DIRECT writes
    a, b = tmp_path / "a" / "out", tmp_path / "b" / "out"
    mk.run_merge(slerp(), str(a), options=mk.MergeOptions(out_shard_size="20K", quiet=True, buffered=True))
    mk.run_merge(slerp(), str(b), options=mk.MergeOptions(out_shard_size="20K", quiet=True))
    same_dirs(str(a), str(b))


def test_unknown_option_warns():
    with pytest.warns(UserWarning, match="unknown option 'colour'"):
        mk.MergeOptions(colour=True)
    mk.MergeOptions(lazy_unpickle=True)  # mergekit's, meaningless here: no warning


def merge_models(config, out, options):
    """A framework's wrapper, as mergekit users write one: validate, merge
    unless the output exists, then reload it."""
    if not os.path.exists(os.path.join(out, "config.json")):
        mk.run_merge(mk.MergeConfiguration.model_validate(config), out, options=options)
    files = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
    merged = {}
    for f in files:
        merged.update(tensors(os.path.join(out, f)))
    return merged


def test_wrapper_merges_once_and_reloads(tmp_path):
    out = str(tmp_path / "merged")
    m1 = merge_models(slerp(), out, mk.MergeOptions(quiet=True))
    stamp = os.stat(os.path.join(out, "model.safetensors")).st_mtime_ns
    m2 = merge_models(slerp(), out, mk.MergeOptions(quiet=True))
    assert os.stat(os.path.join(out, "model.safetensors")).st_mtime_ns == stamp  # skipped
    assert m1 == m2 and m1
    src = tensors(os.path.join(A, "model.safetensors"))
    assert set(m1) == set(src)
    assert all(m1[k][1] == src[k][1] for k in src)


def test_existing_output_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(mk.MergeError, match="exists"):
        mk.run_merge(slerp(), str(out), options=mk.MergeOptions(quiet=True))


def test_cancel_leaves_no_output(tmp_path):
    out = tmp_path / "out"
    ev = threading.Event()
    seen = []

    def progress(done, total, tdone, ntensors):
        seen.append(tdone)
        ev.set()  # cancel after the first tensor

    with pytest.raises(mk.MergeError, match="cancelled"):
        mk.run_merge(slerp(), str(out), options=mk.MergeOptions(quiet=True, progress_callback=progress,
                                                                cancel_event=ev))
    assert seen and not out.exists() and not (tmp_path / "out.mk-partial").exists()


def test_ctrl_c_cancels(tmp_path):
    out = tmp_path / "out"

    def progress(done, total, tdone, ntensors):
        if tdone == 1:
            os.kill(os.getpid(), signal.SIGINT)  # as a Ctrl-C would come
            # while the main thread takes it (these models are written in
            # milliseconds: without the pause the merge would end first)
            time.sleep(0.5)

    # Python raises KeyboardInterrupt only with its own SIGINT handler, which
    # it does not install when it starts with SIGINT ignored (a background
    # job of a shell, as some CI runners start the suite): install it here
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            mk.run_merge(slerp(), str(out), options=mk.MergeOptions(quiet=True, progress_callback=progress))
    finally:
        signal.signal(signal.SIGINT, old)
    assert not out.exists() and not (tmp_path / "out.mk-partial").exists()


# ---- tensors in memory

FA, FB = (os.path.join(TOP, "testdata/models/conf", m) for m in ("llama-f32-a", "llama-f32-b"))


def state_dict(d):
    return {k: np.frombuffer(raw, dtype="<f4").reshape(shape) for k, (dt, shape, raw) in
            tensors(os.path.join(d, "model.safetensors")).items()}


def test_methods_registry():
    ms = mk.methods()
    assert len(ms) >= 20 and {"linear", "slerp", "ties", "dare_ties", "model_stock", "nuslerp"} <= set(ms)
    lin = ms["linear"]["parameters"]
    assert lin["weight"]["scope"] == "per_input" and lin["weight"]["required"]
    assert lin["normalize"]["default"] is True
    assert ms["slerp"]["contract"]["base"] == "required"
    listed = subprocess.run([os.path.join(BIN, "mk-merge"), "--list-methods"], capture_output=True, text=True,
                            check=True).stdout
    assert all(name in listed for name in ms)


def test_merge_tensors_forms():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones((2, 3), np.float32)
    got = mk.merge_tensors([a, b], "linear", parameters={"weight": [0.25, 0.75]})
    assert got.dtype == np.float32 and np.array_equal(got, 0.25 * a + 0.75 * b)
    # a mapping by id, and a broadcast scalar
    by_id = mk.merge_tensors([a, b], "linear", ids=["x", "y"], parameters={"weight": {"x": 0.25, "y": 0.75}})
    assert np.array_equal(by_id, got)
    assert np.array_equal(mk.merge_tensors([a, b], "linear", parameters={"weight": 1.0}), (a + b) / 2)
    assert mk.merge_tensors([a, b], "linear", parameters={"weight": 1.0}, out_dtype="float16").dtype == np.float16
    # a method object, dtypes as NumPy names them
    assert mk.merge_tensors([a, b], mk.get("linear"), parameters={"weight": [0.25, 0.75]},
                            out_dtype=np.float64).dtype == np.float64
    h = mk.merge_tensors([a, b], "linear", parameters={"weight": 1.0}, dtype=np.float16)
    assert h.dtype == np.float16 and np.array_equal(h, ((a.astype(np.float16).astype(np.float32) +
                                                          b.astype(np.float16).astype(np.float32)) / 2).astype(np.float16))


@pytest.mark.parametrize("bad, msg", [
    ({"weight": [1.0]}, "1 values for 2 inputs"),
    ({"wieght": 1.0}, "no parameter 'wieght'"),
    ({"weight": {"z": 1.0}}, "not given"),
])
def test_merge_tensors_refusals(bad, msg):
    a = np.zeros((2, 2), np.float32)
    with pytest.raises(ValueError, match=msg):
        mk.merge_tensors([a, a], "linear", parameters=bad)


def test_merge_tensors_contract_and_shapes():
    a = np.zeros((2, 2), np.float32)
    with pytest.raises(ValueError):
        mk.merge_tensors([a, a], "slerp", parameters={"t": 0.5})  # slerp needs a base
    with pytest.raises(ValueError):
        mk.merge_tensors([a, np.zeros((3, 2), np.float32)], "linear", parameters={"weight": 1.0})


CASES = [
    ("linear", {"weight": {"a": 1.0, "b": 0.5}}, None, "models:\n  - model: A\n    parameters: {weight: 1.0}\n"
     "  - model: B\n    parameters: {weight: 0.5}\nmerge_method: linear\n"),
    ("slerp", {"t": 0.3}, "a", "models:\n  - model: A\n  - model: B\nmerge_method: slerp\nbase_model: A\n"
     "parameters: {t: 0.3}\n"),
    ("task_arithmetic", {"weight": {"b": 0.7}}, "a", "models:\n  - model: A\n  - model: B\n"
     "    parameters: {weight: 0.7}\nmerge_method: task_arithmetic\nbase_model: A\n"),
    ("ties", {"weight": {"b": 0.8}, "density": {"b": 0.5}}, "a", "models:\n  - model: A\n  - model: B\n"
     "    parameters: {weight: 0.8, density: 0.5}\nmerge_method: ties\nbase_model: A\n"),
]


@pytest.mark.parametrize("method, params, base, yml", CASES, ids=[c[0] for c in CASES])
def test_merge_state_dicts_is_mk_yaml_bit_for_bit(method, params, base, yml, tmp_path):
    sds = {"a": state_dict(FA), "b": state_dict(FB)}
    got = mk.merge_state_dicts(sds, method, parameters=params, base=base)
    cfg = tmp_path / "c.yml"
    cfg.write_text(yml.replace("A", FA).replace("B", FB) + "dtype: float32\n")
    subprocess.run([os.path.join(BIN, "mk-yaml"), "--quiet", str(cfg), str(tmp_path / "out")], check=True)
    want = state_dict(str(tmp_path / "out"))
    assert set(got) == set(want)
    for k in want:
        assert got[k].dtype == np.float32 and got[k].tobytes() == want[k].tobytes(), k


def test_merge_state_dicts_strict_and_intersection():
    a, b = state_dict(FA), state_dict(FB)
    extra = dict(b)
    extra["lm_head.extra"] = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="strict=False"):
        mk.merge_state_dicts({"a": a, "b": extra}, "linear", parameters={"weight": 1.0})
    got = mk.merge_state_dicts({"a": a, "b": extra}, "linear", parameters={"weight": 1.0}, strict=False)
    assert set(got) == set(a)
    # buffers that are not floating: equal ones are copied, different ones refused
    a2, b2 = dict(a), dict(b)
    a2["steps"] = np.array([3], np.int64)
    b2["steps"] = np.array([3], np.int64)
    assert mk.merge_state_dicts({"a": a2, "b": b2}, "linear", parameters={"weight": 1.0})["steps"][0] == 3
    b2["steps"] = np.array([4], np.int64)
    with pytest.raises(ValueError, match="steps is not floating and differs"):
        mk.merge_state_dicts({"a": a2, "b": b2}, "linear", parameters={"weight": 1.0})


def test_batch_options_do_not_change_results():
    sds = {"a": state_dict(FA), "b": state_dict(FB)}
    one = mk.merge_state_dicts(sds, "linear", parameters={"weight": 1.0})
    small = mk.merge_state_dicts(sds, "linear", parameters={"weight": 1.0},
                                 batch_options=mk.BatchOptions(max_bytes=4096, max_groups=2))
    assert all(one[k].tobytes() == small[k].tobytes() for k in one)


FC = os.path.join(TOP, "testdata/models/conf/llama-f32-c")
VALUES = {"weight": 0.6, "density": 0.5, "t": 0.3, "gamma": 0.01, "epsilon": 0.05, "select_topk": 0.5,
          "lambda": 1.0}


def method_case(name, info):
    """A merge of the f32 conformance models that the method accepts: its
    required parameters given, as many models as its contract wants."""
    c = info["contract"]
    base = 0 if c["base"] in ("required", "optional") else None
    nin = max(2, c["min_inputs"], c["min_non_base"] + (1 if base is not None else 0))
    # rules past the contract's counts: model_stock wants two models
    # besides the base, nuslerp exactly two besides its base
    nin = max(nin, {"model_stock": 3, "nuslerp": 3}.get(name, 0))
    nin = min(nin, c["max_inputs"])
    glob, per = {}, {}
    for p, s in info["parameters"].items():
        if s["required"]:
            v = VALUES.get(p, 0.5 if s["type"] == "float" else 1 if s["type"] == "int" else True)
            (glob if s["scope"] == "global" else per)[p] = v
    ids = list(range(nin))
    takes = lambda p, i: not (info["parameters"][p]["scope"] == "per_non_base" and i == base)
    params = dict(glob)
    params.update({p: {i: v for i in ids if takes(p, i)} for p, v in per.items()})
    models = [FA, FB, FC][:nin]
    y = "merge_method: %s\n" % name + ("base_model: %s\n" % models[base] if base is not None else "") + "models:\n"
    for i in ids:
        y += "  - model: %s\n" % models[i]
        pp = {p: v for p, v in per.items() if takes(p, i)}
        if pp:
            y += "    parameters: %s\n" % json.dumps(pp)
    y += ("parameters: %s\n" % json.dumps(glob) if glob else "") + "dtype: float32\n"
    return models, ids, base, params, y


@pytest.mark.parametrize("name", sorted(mk.methods()))
def test_every_method_is_mk_yaml_bit_for_bit(name, tmp_path):
    info = mk.methods()[name]
    models, ids, base, params, y = method_case(name, info)
    (tmp_path / "c.yml").write_text(y)
    subprocess.run([os.path.join(BIN, "mk-yaml"), "--quiet", str(tmp_path / "c.yml"), str(tmp_path / "out")],
                   check=True)
    want = state_dict(str(tmp_path / "out"))
    sds = {i: state_dict(m) for i, m in zip(ids, models)}
    got = mk.merge_state_dicts(sds, name, parameters=params, base=base)
    assert set(got) == set(want)
    bad = [k for k in want if got[k].tobytes() != want[k].tobytes()]
    assert not bad, bad
    # one tensor through merge_tensors (its name keys the random methods)
    k = "model.layers.1.mlp.down_proj.weight"
    one = mk.merge_tensors([sds[i][k] for i in ids], name, parameters=params, ids=ids, base_index=base, name=k)
    assert one.tobytes() == want[k].tobytes()


def test_groups_and_per_group_values():
    from mk import merge_methods
    sa, sb, sc = state_dict(FA), state_dict(FB), state_dict(FC)
    k1, k2 = "model.layers.0.mlp.up_proj.weight", "model.embed_tokens.weight"
    groups = [merge_methods.TensorGroup.from_tensors([sa[k1], sb[k1]], ids=["a", "b"], name=k1),
              merge_methods.TensorGroup.from_tensors([sa[k2], sc[k2]], ids=["a", "c"], name=k2, vocabulary_axis=0)]
    p = {"weight": merge_methods.PerGroupValues([{"a": 0.25, "b": 0.75}, {"a": 0.5, "c": 0.5}])}
    one, two = merge_methods.get("linear")(groups, parameters=p, batch_options=merge_methods.BatchOptions(max_bytes=1 << 20))
    assert one.tobytes() == mk.merge_tensors([sa[k1], sb[k1]], "linear", parameters={"weight": [0.25, 0.75]}).tobytes()
    assert two.tobytes() == mk.merge_tensors([sa[k2], sc[k2]], "linear", parameters={"weight": [0.5, 0.5]}).tobytes()
    with pytest.raises(ValueError, match="2 groups"):
        merge_methods.get("linear")(groups, parameters={"weight": merge_methods.PerGroupValues([1.0])})
    with pytest.raises(KeyError, match="no merge method"):
        merge_methods.get("nope")
