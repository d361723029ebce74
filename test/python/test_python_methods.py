"""Merge methods written in Python (mk.merge_methods): definition-time
checks, direct calls, registration, YAML merges through run_merge that
name them (checked against the SHA-256 of the tensors mergekit 0.1.5 wrote
for the same cases: testdata/python/methods/, made by
scripts/python-methods-conformance), mergekit's older decorator form, and
merges into memory (iter_merge, run_merge_in_memory) against the written
merge.  NumPy kernels here; the torch kernels are compared with mergekit
itself by the conformance script."""
import hashlib
import json
import os
import struct
import sys
import threading
from typing import Annotated, List

import numpy as np
import pytest

import mk
import mk.merge_methods as mm

TOP = os.getcwd()
sys.path.insert(0, os.path.join(TOP, "testdata/python"))
import method_examples  # noqa: E402

A, B = (os.path.join("testdata/models", m) for m in ("tiny-a", "tiny-b"))
OPT = dict(copy_tokenizer=False, write_model_card=False, quiet=True)


def shards(path):
    """name -> (dtype, shape, bytes) of a model directory's safetensors."""
    out = {}
    for f in sorted(os.listdir(path)):
        if not f.endswith(".safetensors"):
            continue
        raw = open(os.path.join(path, f), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        h = json.loads(raw[8:8 + n])
        out.update({k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
                    for k, v in h.items() if k != "__metadata__"})
    return out


@pytest.fixture(scope="module")
def examples():
    """The method API's examples, NumPy kernels, registered once."""
    ms = method_examples.define(mm, "numpy")
    for m in ms.values():
        if m.name not in mk.methods():
            mm.register(m)
    return {n: mm.get(n) for n in ms}


# ---- definition

class Ge:   # a constraint as annotated_types or pydantic's Field carry one
    def __init__(self, ge):
        self.ge = ge


@pytest.mark.parametrize("src,msg", [
    ("def k(group: mm.TensorGroup, x) -> np.ndarray: pass", "must have a type annotation"),
    ("def k(group, x: float) -> np.ndarray: pass", "first argument"),
    ("def k(group: mm.TensorGroup, x: float): pass", "return annotation"),
    ("def k(group: mm.TensorGroup, w: Annotated[np.ndarray, mm.BatchParameter(float)]) -> np.ndarray: pass",
     "not BatchParameter"),
    ("def k(batch: mm.TensorBatch, w: mm.PerInput[float]) -> np.ndarray: pass", "not PerInput"),
    ("def k(batch: mm.TensorBatch, w: np.ndarray) -> np.ndarray: pass", "annotated with BatchParameter"),
    ("def k(batch: mm.TensorBatch, w: Annotated[np.ndarray, mm.BatchParameter(str)]) -> np.ndarray: pass",
     "bool, int or float"),
    ("def k(batch: mm.TensorBatch, w: Annotated[np.ndarray, mm.BatchParameter(float), Ge(0)]) -> np.ndarray: pass",
     "inside"),
    ("def k(group: mm.TensorGroup, w: Annotated[float, mm.ParameterScope.INPUT, mm.ParameterScope.SHARED]) "
     "-> np.ndarray: pass", "more than one scope"),
    ("def k(group: mm.TensorGroup, w: mm.PerInputValues) -> np.ndarray: pass", r"PerInput\[T\]"),
    ("def k(group: mm.TensorGroup, *w: float) -> np.ndarray: pass", "keyword"),
])
def test_definitions_refused(src, msg):
    ns = {"mm": mm, "np": np, "Annotated": Annotated, "Ge": Ge}
    exec(src, ns)
    with pytest.raises(TypeError, match=msg):
        mm.merge_method(ns["k"], name="k")


def test_non_base_needs_a_base_aware_contract():
    def k(group: mm.TensorGroup, w: mm.PerNonBase[float]) -> np.ndarray:
        return group.tensors[0]
    with pytest.raises(ValueError, match="base-aware"):
        mm.merge_method(k, name="k")
    m = mm.merge_method(k, name="k", contract=mm.InputContract(base=mm.BasePolicy.REQUIRED))
    assert [(p.name, p.scope) for p in m.spec.parameters] == [("w", mm.ParameterScope.NON_BASE)]
    assert not m.supports_batching


def test_spec_of_a_batch_kernel(examples):
    m = examples["weighted_average"]
    assert m.supports_batching and m.spec.pretty_name == "Weighted Average"
    w, n = m.spec.parameters
    assert (w.name, w.scope, w.batch_tensor, w.required) == ("weight", mm.ParameterScope.INPUT, True, True)
    assert (n.name, n.batch_tensor, n.default) == ("normalize", False, True)
    info = mk.methods()["weighted_average"]
    assert info["parameters"]["weight"]["scope"] == "per_input" and info["parameters"]["weight"]["required"]
    assert info["parameters"]["normalize"] == dict(info["parameters"]["normalize"], type="bool", default=True)


# ---- direct calls

def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_group_kernel_direct(examples):
    a = rnd(3, 4)
    assert np.array_equal(mm.merge_tensors([a], examples["scaled_copy"], parameters={"scale": 2.0}), a * 2)
    assert np.array_equal(mm.merge_tensors([a], "scaled_copy"), a)
    b = rnd(3, 4, seed=1)
    r = mm.merge_tensors([a, b], "per_input_scale", ids=["p", "q"], parameters={"gain": {"p": 0.5, "q": 2.0}})
    assert np.array_equal(r, a * np.float32(0.5) + b * np.float32(2.0) + np.float32(0.0))


def test_batch_kernel_equals_linear_bit_for_bit(examples):
    ts = [rnd(5, 7, seed=i) for i in range(3)]
    w = [0.2, 0.3, 0.5]
    mine = mm.merge_tensors(ts, "weighted_average", parameters={"weight": w})
    assert np.array_equal(mine, mk.merge_tensors(ts, "linear", parameters={"weight": w}))
    raw = mm.merge_tensors(ts, "weighted_average", parameters={"weight": w, "normalize": False})
    assert np.allclose(raw, sum(t * np.float32(x) for t, x in zip(ts, w)), rtol=0, atol=1e-6)


def test_batching_does_not_change_results_and_validates_first(examples):
    calls = []
    wavg = examples["weighted_average"]

    def k(batch: mm.TensorBatch, weight: Annotated[np.ndarray, mm.BatchParameter(float, mm.ParameterScope.INPUT)],
          normalize: bool = True) -> np.ndarray:
        calls.append(batch.tensors[0].shape[0])
        return wavg.implementation(batch, weight, normalize)
    m = mm.merge_method(k, name="counted")
    groups = [mm.TensorGroup.from_tensors([rnd(4, 4, seed=i), rnd(4, 4, seed=10 + i)], name="t%d" % i)
              for i in range(5)]
    p = {"weight": mm.PerGroupValues([[1.0, float(i + 1)] for i in range(5)])}
    one = m(groups, parameters=p)
    assert calls == [5]
    calls.clear()
    small = m(groups, parameters=p, batch_options=mm.BatchOptions(max_groups=2))
    assert calls == [2, 2, 1]
    assert all(np.array_equal(x, y) for x, y in zip(one, small))
    lin = mk.get("linear")(groups, parameters=p)
    assert all(np.array_equal(x, y) for x, y in zip(one, lin))
    # options partition the batches: a call per value
    calls.clear()
    flags = [True, False, True, False, True]
    mixed = m(groups, parameters=dict(p, normalize=mm.PerGroupValues(flags)))
    assert calls == [3, 2]
    raw = mk.get("linear")(groups, parameters=dict(p, normalize=False))
    for i, f in enumerate(flags):
        assert np.array_equal(mixed[i], one[i] if f else raw[i])
    # a bad last group: refused before any kernel runs
    calls.clear()
    bad = groups[:4] + [mm.TensorGroup.from_tensors([rnd(4, 4), rnd(3, 4)], name="odd")]
    with pytest.raises(ValueError, match="size mismatch for odd"):
        m(bad, parameters=p)
    with pytest.raises(ValueError, match="expects 3 group values; got 5"):
        m(groups[:3], parameters=p)
    assert calls == []


def test_contracts_and_constraints(examples):
    a, b, c = rnd(2, 2), rnd(2, 2, seed=1), rnd(2, 2, seed=2)
    with pytest.raises(ValueError, match="requires a base input"):
        mm.merge_tensors([a, b], "base_interpolation", parameters={"t": 0.5})
    with pytest.raises(ValueError, match="exactly 2 inputs"):
        mm.merge_tensors([a, b, c], "base_interpolation", base_index=0, parameters={"t": 0.5})
    r = mm.merge_tensors([a, b], "base_interpolation", base_index=0, parameters={"t": 0.25})
    assert np.allclose(r, a * 0.75 + b * 0.25, rtol=0, atol=1e-6)

    def k(group: mm.TensorGroup, s: Annotated[float, Ge(0)] = 1.0, n: int = 2) -> np.ndarray:
        return group.tensors[0] * s * n
    m = mm.merge_method(k, name="bounded")
    with pytest.raises(ValueError, match="parameter s"):
        mm.merge_tensors([a], m, parameters={"s": -1.0})
    with pytest.raises((TypeError, ValueError), match="parameter n"):
        mm.merge_tensors([a], m, parameters={"n": 1.5})
    with pytest.raises(TypeError, match="unknown parameter"):
        mm.merge_tensors([a], m, parameters={"z": 1})
    with pytest.raises(TypeError, match="missing required parameter weight"):
        mm.merge_tensors([a, b], "weighted_average")


def test_state_dicts_with_a_python_method(examples):
    sa = {"w": rnd(3, 3), "b": rnd(3), "steps": np.array([7], dtype=np.int64)}
    sb = {"w": rnd(3, 3, seed=5), "b": rnd(3, seed=6), "steps": np.array([7], dtype=np.int64)}
    out = mm.merge_state_dicts({"a": sa, "b": sb}, "weighted_average", parameters={"weight": {"a": 1.0, "b": 1.0}})
    ref = mk.merge_state_dicts({"a": sa, "b": sb}, "linear", parameters={"weight": {"a": 1.0, "b": 1.0}})
    assert list(out) == ["w", "b", "steps"]
    assert all(np.array_equal(out[k], ref[k]) for k in out)
    sb["steps"] = np.array([8], dtype=np.int64)
    with pytest.raises(ValueError, match="steps is not floating"):
        mm.merge_state_dicts({"a": sa, "b": sb}, "weighted_average", parameters={"weight": 1.0})


def test_registry(examples):
    names = [m.name for m in mm.registered_methods()]
    assert names[:2] == ["linear", "slerp"] and "weighted_average" in names
    with pytest.raises(ValueError, match="already registered"):
        mm.register(examples["scaled_copy"])
    with pytest.raises(ValueError, match="already registered"):
        mm.register(mm.merge_method(examples["scaled_copy"].implementation, name="linear"))
    with pytest.raises(KeyError):
        mm.get("no_such_method")
    with pytest.raises(RuntimeError):   # as mergekit raises it
        mm.get("no_such_method")


# ---- YAML merges naming Python methods

CASES = sorted(f[:-5] for f in os.listdir("testdata/python/methods") if f.endswith(".json"))


@pytest.mark.parametrize("case", [c for c in CASES if "bf16" not in c])
def test_yaml_merge_equals_mergekit(case, examples, tmp_path):
    # NumPy kernels in float32 here, torch kernels under mergekit: the same
    # operations in the same order, so the same bits (bfloat16 cases need
    # torch's bfloat16 arithmetic: the conformance script checks those)
    g = json.load(open("testdata/python/methods/%s.json" % case))
    mk.run_merge(g["config"], str(tmp_path / "out"), options=mk.MergeOptions(**OPT))
    got = shards(str(tmp_path / "out"))
    assert sorted(got) == sorted(g["mergekit_tensors"])
    for k, (dt, shape, sha) in g["mergekit_tensors"].items():
        assert (got[k][0], got[k][1]) == (dt, shape), k
        assert hashlib.sha256(got[k][2]).hexdigest() == sha, k


def test_yaml_parameters_are_checked_by_the_planner(examples, tmp_path):
    def k(group: mm.TensorGroup, s: Annotated[float, Ge(0)] = 1.0, n: int = 1) -> np.ndarray:
        return group.tensors[0] * s * n
    mm.register(mm.merge_method(k, name="bounded_yaml"))
    bad = {"merge_method": "bounded_yaml", "models": [{"model": A}], "parameters": {"s": [1.0, -1.0]}}
    with pytest.raises(mk.ConfigError) as e:
        mk.run_merge(bad, str(tmp_path / "o1"), options=mk.MergeOptions(**OPT))
    assert "s" in str(e.value) and not (tmp_path / "o1").exists()
    bad = {"merge_method": "bounded_yaml", "models": [{"model": A}], "parameters": {"n": [1, 1.5]}}
    with pytest.raises(mk.ConfigError, match="n"):
        mk.run_merge(bad, str(tmp_path / "o2"), options=mk.MergeOptions(**OPT))


def test_yaml_kernels_see_mergekits_ids_and_order(tmp_path):
    seen = {}

    def k(group: mm.TensorGroup) -> np.ndarray:
        seen[group.metadata.name] = [(str(e.id), type(e.id).__name__, e.is_base, str(e.tensor.dtype))
                                     for e in group.entries]
        return group.tensors[0]
    mm.register(mm.merge_method(k, name="peek_ids"))
    for base, models, order in ((B, [A, B], [A, B]), (A, [B], [B, A]), (None, [B, A], [B, A])):
        seen.clear()
        cfg = {"merge_method": "peek_ids", "models": [{"model": m} for m in models], "dtype": "float16"}
        if base:
            cfg["base_model"] = base
        mk.run_merge(cfg, str(tmp_path / ("o%d" % len(os.listdir(tmp_path)))), options=mk.MergeOptions(**OPT))
        assert len(seen) == 21
        for name, entries in seen.items():
            assert [e[0] for e in entries] == order, (name, entries)
            assert [e[2] for e in entries] == [m == base for m in order]
            assert {e[1] for e in entries} == {"ModelReference"} and {e[3] for e in entries} == {"float16"}


def test_a_kernel_error_is_raised_again(tmp_path):
    def k(group: mm.TensorGroup) -> np.ndarray:
        if "mlp" in group.metadata.name:
            raise ZeroDivisionError("no mlp today: " + group.metadata.name)
        return group.tensors[0]
    mm.register(mm.merge_method(k, name="picky"))
    with pytest.raises(ZeroDivisionError, match="no mlp today"):
        mk.run_merge({"merge_method": "picky", "models": [{"model": A}]}, str(tmp_path / "out"),
                     options=mk.MergeOptions(**OPT))
    assert not os.path.exists(tmp_path / "out")


def test_the_merge_lets_go_of_the_gil():
    # libmk is called through a ctypes.CDLL, which releases the GIL for the
    # call's length (a PyDLL would hold it); the kernels' callbacks take it
    # back only for themselves
    import ctypes
    from mk import _lib
    lib = _lib._load()
    assert isinstance(lib, ctypes.CDLL) and not isinstance(lib, ctypes.PyDLL)
    assert lib._func_flags_ & ctypes._FUNCFLAG_PYTHONAPI == 0


# ---- mergekit's older decorator form

def f32(entry):
    dt, _, raw = entry
    if dt == "BF16":
        return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(raw, {"F32": np.float32, "F16": np.float16}[dt]).astype(np.float32)


def test_legacy_form_registers_itself_and_merges(tmp_path):
    m = method_examples.define_legacy(mm.merge_method, "numpy", suffix="_np")
    assert mm.get("legacy_average_np") is m
    assert m.spec.contract.base == mm.BasePolicy.OPTIONAL
    assert [(p.name, p.scope) for p in m.spec.parameters] == [("weight", mm.ParameterScope.NON_BASE),
                                                              ("normalize", mm.ParameterScope.SHARED)]
    a, b, base = rnd(2, 3), rnd(2, 3, seed=1), rnd(2, 3, seed=2)
    r = mm.merge_tensors([base, a, b], m, base_index=0, parameters={"weight": [1.0, 3.0]})
    assert np.allclose(r, (a * 0.25 + b * 0.75) * 0.5 + base * 0.5, rtol=0, atol=1e-6)
    cfg = {"merge_method": "legacy_average_np", "base_model": A,
           "models": [{"model": A}, {"model": B, "parameters": {"weight": 1.0}}], "dtype": "float32"}
    mk.run_merge(cfg, str(tmp_path / "out"), options=mk.MergeOptions(**OPT))
    got, ta, tb = shards(str(tmp_path / "out")), shards(A), shards(B)
    k = "model.layers.0.mlp.up_proj.weight"
    x, y = f32(ta[k]), f32(tb[k])
    assert np.allclose(np.frombuffer(got[k][2], np.float32), y * 0.5 + x * 0.5, rtol=0, atol=1e-6)

    @mm.merge_method(name="legacy_plain_np")
    def plain(tensors: List[np.ndarray], scale: float = 1.0) -> np.ndarray:
        return tensors[0] * scale   # the base first, when there is one
    assert plain.spec.contract.base == mm.BasePolicy.IGNORED
    assert np.array_equal(mm.merge_tensors([b, a], "legacy_plain_np", base_index=1, parameters={"scale": 2.0}),
                          a * 2)
    with pytest.raises(TypeError, match="vector parameters"):
        @mm.merge_method(name="legacy_bad")
        def bad(tensors: List[np.ndarray], w: List[str]) -> np.ndarray:
            return tensors[0]


# ---- merges into memory

def test_in_memory_merge_equals_the_written_one(tmp_path):
    cfg = {"merge_method": "slerp", "base_model": A, "models": [{"model": A}, {"model": B}],
           "parameters": {"t": [0.1, 0.7]}, "dtype": "bfloat16"}
    mk.run_merge(cfg, str(tmp_path / "out"), options=mk.MergeOptions(quiet=True))
    written = shards(str(tmp_path / "out"))
    got = {}
    for name, t in mk.iter_merge(cfg, mk.MergeOptions(quiet=True), tensor_type="numpy"):
        assert name not in got
        got[name] = t
    assert sorted(got) == sorted(written)
    for k, (dt, shape, raw) in written.items():
        assert list(got[k].shape) == shape and got[k].tobytes() == raw, k
        assert got[k].dtype == (np.uint16 if dt == "BF16" else got[k].dtype)
    seen = {}
    mk.run_merge_in_memory(cfg, lambda n, t: seen.__setitem__(n, t.tobytes()),
                           mk.MergeOptions(quiet=True, max_memory="512MiB"), tensor_type="numpy")
    assert seen == {k: v[2] for k, v in written.items()}


def test_in_memory_merge_stops_early_and_raises(tmp_path):
    cfg = {"merge_method": "linear", "models": [{"model": A, "parameters": {"weight": 1.0}},
                                                 {"model": B, "parameters": {"weight": 1.0}}]}
    it = mk.iter_merge(cfg, mk.MergeOptions(quiet=True), tensor_type="numpy")
    first = next(it)
    assert isinstance(first[0], str)
    it.close()   # cancels the merge; the thread is joined

    def cb(name, t):
        raise LookupError("enough: " + name)
    with pytest.raises(LookupError, match="enough"):
        mk.run_merge_in_memory(cfg, cb, mk.MergeOptions(quiet=True), tensor_type="numpy")
    # the merges' threads were joined
    assert not [t.name for t in threading.enumerate() if t.name in ("mk iter_merge", "mk_run_merge")]


def test_in_memory_merge_with_a_python_method(examples):
    g = json.load(open("testdata/python/methods/per_input_scale-f32.json"))
    got = dict(mk.iter_merge(g["config"], mk.MergeOptions(quiet=True), tensor_type="numpy"))
    for k, (dt, shape, sha) in g["mergekit_tensors"].items():
        assert hashlib.sha256(got[k].tobytes()).hexdigest() == sha, k


def test_torch_kernels_when_torch_is_installed(tmp_path):
    torch = pytest.importorskip("torch")
    ms = method_examples.define(mm, "torch")
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    r = mm.merge_tensors([a, b], ms["weighted_average"], parameters={"weight": [1.0, 3.0]})
    assert isinstance(r, torch.Tensor) and torch.allclose(r, a * 0.25 + b * 0.75, atol=1e-6)
    # NumPy inputs to a torch kernel: converted without a copy
    an = np.ones((2, 2), np.float32)
    assert isinstance(mm.merge_tensors([an], ms["scaled_copy"], parameters={"scale": 3.0}), torch.Tensor)
    out = dict(mk.iter_merge({"merge_method": "linear", "models": [{"model": A, "parameters": {"weight": 1.0}}],
                              "dtype": "bfloat16"}, mk.MergeOptions(quiet=True)))
    assert all(isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16 for t in out.values())


def test_elementwise_methods_run_on_pieces(tmp_path):
    shapes = []

    def k(batch: mm.TensorBatch, weight: Annotated[np.ndarray, mm.BatchParameter(float, mm.ParameterScope.INPUT)]
          ) -> np.ndarray:
        shapes.append(batch.tensors[0].shape)
        shape = (batch.tensors[0].shape[0],) + (1,) * (batch.tensors[0].ndim - 1)
        out = np.zeros_like(batch.tensors[0])
        for t, w in zip(batch.tensors, [weight[:, i] for i in range(weight.shape[1])]):
            out = out + t * w.reshape(shape)
        return out
    whole = mm.merge_method(k, name="wsum_whole")
    pieces = mm.merge_method(k, name="wsum_pieces", elementwise=True)
    assert pieces.spec.elementwise and not whole.spec.elementwise
    mm.register(whole)
    mm.register(pieces)
    assert mk.methods()["wsum_pieces"]["parameters"]["weight"]["scope"] == "per_input"
    outs = {}
    for name in ("wsum_whole", "wsum_pieces"):
        shapes.clear()
        cfg = {"merge_method": name, "models": [{"model": A, "parameters": {"weight": 0.5}},
                                                {"model": B, "parameters": {"weight": [1.0, 3.0]}}],
               "dtype": "float32"}
        outs[name] = dict(mk.iter_merge(cfg, mk.MergeOptions(quiet=True), tensor_type="numpy"))
        if name == "wsum_pieces":
            # 1-D pieces of the merge's chunks, more calls than tensors
            assert {len(s) for s in shapes} == {2} and len(shapes) >= len(outs[name])
        else:
            assert len(shapes) == len(outs[name]) and max(len(s) for s in shapes) == 3
    assert outs["wsum_whole"].keys() == outs["wsum_pieces"].keys()
    assert all(np.array_equal(outs["wsum_whole"][n], outs["wsum_pieces"][n]) for n in outs["wsum_whole"])
