"""mergekit's module names in mk: mk.architecture (libmk's definitions,
against mergekit's weights for the tiny llama), mk.card (libmk's card, the
text mergekit's generate_card gives and mk-yaml writes), mk.sparsify
(numpy, against mergekit's deterministic methods), mk.__version__.
Golden files: testdata/golden/python-api (see testdata/README)."""
import json
import os
import re
import subprocess

import numpy as np
import pytest

import mk
import mk.merge
import mk.options
from mk import sparsify as sp
from mk.architecture import WeightInfo, get_architecture_info
from mk.card import generate_card

TOP = os.getcwd()
G = os.path.join(TOP, "testdata/golden/python-api")
A, B = (os.path.join(TOP, "testdata/models", m) for m in ("tiny-a", "tiny-b"))


def golden(name):
    return json.load(open(os.path.join(G, name)))


def slerp():
    return {"merge_method": "slerp", "base_model": A, "models": [{"model": A}, {"model": B}],
            "parameters": {"t": 0.3}, "dtype": "bfloat16"}


def test_module_paths():
    assert mk.merge.run_merge is mk.run_merge
    assert mk.merge.MergeOptions is mk.options.MergeOptions is mk.MergeOptions


def test_version_is_libmks():
    make = open(os.path.join(TOP, "Makefile")).read()
    version = re.search(r"^VERSION\s*:=\s*(\S+)", make, re.M).group(1)
    assert mk.__version__ == version
    assert mk.libmk_version() == version


def dumped(w):
    d = w.model_dump()
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def test_architecture_weights_as_mergekit():
    arch = get_architecture_info(mk.MergeConfiguration.model_validate(slerp()), mk.MergeOptions())
    assert arch.expected_model_type == "llama" and "LlamaForCausalLM" in arch.architectures
    assert list(arch.modules) == ["default"]
    hf = json.load(open(os.path.join(A, "config.json")))
    want = golden("arch-tiny-a.json")
    assert [dumped(w) for w in arch.all_weights(hf)] == want
    assert [dumped(w) for w in arch.all_weights()] == want  # the base model's config
    embed = [w.name for w in arch.all_weights() if w.is_embed]
    assert embed == [w["name"] for w in want if w["vocabulary_axis"] == 0]
    # another layer count: the config given decides
    hf["num_hidden_layers"] = 5
    mod = arch.modules["default"].architecture
    assert mod.num_layers(hf) == 5
    assert len(arch.all_weights(hf)) == len(want) + 3 * len(mod.layer_weights(0, hf))
    assert mod.layer_weights(4, hf)[0].name.startswith("model.layers.4.")
    assert WeightInfo("x", is_embed=True).vocabulary_axis == 0


def test_architecture_error_is_config_error(tmp_path):
    with pytest.raises(mk.ConfigError):
        get_architecture_info({"merge_method": "linear", "models": [{"model": str(tmp_path / "none"),
                                                                     "parameters": {"weight": 1.0}}]})


def unordered(card):
    """The card with its runs of list lines ("- " front matter, "* "
    bullets) sorted: mergekit lists the models in a set's order, which
    changes from run to run (PYTHONHASHSEED); mk's is the configuration's."""
    out, run = [], []
    for line in card.split("\n") + [""]:
        if line.startswith(("- ", "* ")):
            run.append(line)
            continue
        out += sorted(run) + [line]
        run = []
    return "\n".join(out)


@pytest.mark.parametrize("case", golden("cards.json"), ids=lambda c: c["config"]["merge_method"])
def test_card_as_mergekit(case):
    got = generate_card(case["config"], case["yaml"], case["name"])
    assert unordered(got) == unordered(case["card"])
    assert got.count("\n") == case["card"].count("\n")


def test_card_is_what_mk_yaml_writes(tmp_path):
    cfg = tmp_path / "c.yml"
    text = "merge_method: slerp\nbase_model: %s\nmodels:\n  - model: %s\n  - model: %s\n" \
           "parameters:\n  t: 0.3\ndtype: bfloat16\n" % (A, A, B)
    cfg.write_text(text)
    out = tmp_path / "merged"
    subprocess.run([os.path.join(os.environ["MK_BIN"], "mk-yaml"), "--quiet", str(cfg), str(out)], check=True)
    readme = (out / "README.md").read_text()
    assert generate_card(text, text, "merged") == readme
    assert generate_card(mk.MergeConfiguration.from_yaml(text), text, "merged") == readme


def test_sparsify_as_mergekit():
    x = np.load(os.path.join(G, "sparsify-in.npy"))
    want = golden("sparsify.json")
    for key, v in want.items():
        method, norm, d = key.split("/")
        rn = None if norm == "None" else sp.RescaleNorm(norm)
        got = sp.sparsify(x, float(d), sp.SparsificationMethod(method), gamma=0.05, rescale_norm=rn)
        v = np.array(v, dtype=np.float32)
        assert got.dtype == np.float32 and got.shape == x.shape
        # the same elements kept; values within 4 ulp (the rescale's norms)
        assert ((got == 0) == (v == 0)).all(), key
        np.testing.assert_allclose(got, v, rtol=4.8e-7, atol=0, err_msg=key)


def test_sparsify_random_methods():
    x = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
    r = sp.sparsify(x, 0.3, "random", rng=5)
    assert np.array_equal(r, sp.bernoulli(x, 0.3, rng=5))  # a seed repeats
    kept = (r != 0).mean()
    assert abs(kept - 0.3) < 0.02  # binomial: sd 0.0018
    r = sp.sparsify(x, 0.5, sp.SparsificationMethod.della_magprune, epsilon=0.2, rng=3)
    kept = r != 0
    order = np.argsort(np.abs(x), axis=1)
    small = np.take_along_axis(kept, order[:, :64], axis=1).mean()
    large = np.take_along_axis(kept, order[:, -64:], axis=1).mean()
    assert 0.25 < small < 0.40 and 0.60 < large < 0.75  # p from 0.3 to 0.7 by rank
    with pytest.raises(ValueError):
        sp.della_magprune(x, 0.5, 0.6)
    l1 = sp.bernoulli(x, 0.5, rescale_norm="l1", rng=2)
    assert abs(np.abs(l1).sum() / np.abs(x).sum() - 1) < 1e-5
    h = x.astype(np.float16)
    assert sp.magnitude(h, 0.5).dtype == np.float16
