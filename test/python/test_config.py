"""Configurations as objects (mk.config, mk.common): the same data and the
same YAML as mergekit 0.1.5 for every configuration of testdata/configs/
and test/conformance/ and for ones built from the data classes (golden
files in testdata/python/config/, made by scripts/python-config-golden.py
with mergekit), every structural problem listed at once, model references
parsed and printed back, and run_merge writing into mergekit_config.yml
the configuration's YAML text or its to_yaml().  Run by test/cli/python.sh
in the repository's root."""
import glob
import json
import os
import sys

import pytest
import yaml

import mk
from mk.common import ModelPath, ModelReference, parse_kmb
from mk.config import (ConditionalParameter, ConfigReader, InputModelDefinition, InputSliceDefinition,
                       MergeConfiguration, OutputSliceDefinition, TokenEmbeddingConfig, TokenizerConfig,
                       evaluate_setting)

GOLDEN = "testdata/python/config"
NAMES = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(GOLDEN, "*.json")))


sys.path.insert(0, "testdata/python")
import config_cases  # noqa: E402

K = config_cases.namespace("mk")
BUILDERS = {name: (lambda fn: lambda: fn(K))(fn) for name, fn in config_cases.BUILDERS.items()}


def build_objects():
    return config_cases.build_objects(K)


def build_tokenizer_modules():
    return config_cases.build_tokenizer_modules(K)


def golden(name):
    with open(os.path.join(GOLDEN, name + ".json")) as f:
        rec = json.load(f)
    with open(os.path.join(GOLDEN, name + ".yml")) as f:
        rec["to_yaml"] = f.read()
    return rec


def made(rec):
    src = rec["source"]
    if src in BUILDERS:
        return BUILDERS[src]()
    with open(src) as f:
        return MergeConfiguration.model_validate(yaml.safe_load(f))


def exact(a, b):
    """Equal data of equal types (1, 1.0 and True told apart)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_goldens_are_there():
    # every configuration file and the three built ones (48 files today)
    files = glob.glob("testdata/configs/*.yml") + glob.glob("test/conformance/*.yml")
    assert len(NAMES) == len(files) + 3, (len(NAMES), len(files))


@pytest.mark.parametrize("name", NAMES)
def test_dump_and_yaml_are_mergekits(name):
    rec = golden(name)
    c = made(rec)
    d = c.model_dump(mode="json")
    assert d == rec["model_dump"] and exact(d, rec["model_dump"])
    assert list(d) == [  # the fields' order, as pydantic's (model_dump_json below holds it too)
        "modules", "slices", "models", "merge_method", "base_model", "dtype", "tokenizer_source", "tokenizer",
        "chat_template", "out_dtype", "parameters"]
    assert exact(config_cases.plain(c.model_dump()), rec["model_dump_python"])
    assert exact(c.model_dump(mode="json", exclude_none=True), rec["exclude_none"])
    assert c.model_dump_json() == rec["model_dump_json"]
    assert c.to_yaml() == rec["to_yaml"]
    assert sorted(str(m) for m in c.referenced_models()) == rec["referenced_models"]
    # what to_yaml writes reads back as the same configuration (its
    # mappings' keys sorted)
    again = MergeConfiguration.model_validate(yaml.safe_load(c.to_yaml()))
    assert exact(again.model_dump(mode="json"), d) and again == c


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith(("configs-", "conformance-"))])
def test_from_yaml_is_model_validate(name):
    src = golden(name)["source"]
    text = open(src).read()
    c = MergeConfiguration.from_yaml(text, src)
    assert c.model_dump_json() == MergeConfiguration.model_validate(yaml.safe_load(text)).model_dump_json()
    assert c._source() == (text, src)  # unchanged: its own text


def test_python_mode_keeps_tuples_and_objects_dump_as_text():
    c = build_objects()
    s = c.model_dump()["slices"][0]["sources"][0]
    assert s["layer_range"] == (0, 3) and isinstance(s["layer_range"], tuple)
    assert s["model"] == "testdata/models/conf/llama-f32-a"
    assert c.model_dump(mode="json")["slices"][0]["sources"][0]["layer_range"] == [0, 3]
    assert c.slices[0].sources[1].model.model.path == "testdata/models/conf/llama-f32-b"
    assert c.parameters["density"][1].filter == "mlp" and c.parameters["density"][2].filter is None
    ed = c.model_dump(exclude_defaults=True)
    assert "tokenizer" not in ed and "filter" not in ed["parameters"]["density"][2]
    assert c.model_dump(include={"merge_method", "dtype"}) == {"merge_method": "ties", "dtype": "float32"}
    assert "slices" not in c.model_dump(exclude={"slices"})
    assert c.model_dump(exclude_unset=True).keys() == {"merge_method", "slices", "base_model", "parameters",
                                                       "dtype"}


def test_every_problem_at_once():
    bad = {
        "models": [
            {"model": "org/a", "parameters": {"weight": None}},
            {"parameters": 3},
            {"model": "org/b", "parameters": {"density": [0.5, {"value": 1}]}},
        ],
        "slices": [{"sources": [{"model": "org/a", "layer_range": [0, 2, 4]}], "residual_weight": "heavy"}],
        "dtype": 16,
        "tokenizer_source": "base",
        "tokenizer": {"tokens": {"<s>": {"source": {"kind": "model_token", "model": "org/a"}}}},
    }
    with pytest.raises(mk.ConfigError) as e:
        MergeConfiguration.model_validate(bad)
    d = e.value.diagnostics
    assert isinstance(e.value, ValueError)
    want = [  # in the fields' order
        "slices.0.sources.0.layer_range: expected a list of two, got a list of 3",
        "slices.0.residual_weight: expected a number, got a string ('heavy')",
        "models.0.parameters.weight: expected a number, a boolean, a string, a list of them",
        "models.1.model: required field missing",
        "models.1.parameters: expected a mapping, got a number (3)",
        "models.2.parameters.density: a list mixes {value, filter} entries with plain values",
        "merge_method: required field missing",
        "dtype: expected a string, got a number (16)",
        "tokenizer.tokens.<s>.source: give token_id or token",
        ": give exactly one of models, slices or modules (models and slices are given)",
        "tokenizer: give tokenizer_source or tokenizer, not both",
    ]
    assert len(d) == len(want), d
    for line, w in zip(d, want):
        assert line.startswith("error: config") and w in line, (line, w)
    assert str(e.value) == "\n".join(d)


def test_yaml_problems_name_their_line():
    text = ("merge_method: linear\n"
            "models:\n"
            "  - model: org/a\n"
            "    parameters:\n"
            "      weight: [1, {value: 2}]\n"
            "  - parameters: {weight: 1}\n")
    with pytest.raises(mk.ConfigError) as e:
        MergeConfiguration.from_yaml(text, "bad.yml")
    assert e.value.diagnostics == [
        "error: bad.yml:5:15: models.0.parameters.weight: a list mixes {value, filter} entries with plain values",
        "error: bad.yml:6:5: models.1.model: required field missing"]
    with pytest.raises(mk.ConfigError, match=r"bad\.yml:2:1: not YAML: expected ',' or ']'"):
        MergeConfiguration.from_yaml("merge_method: [linear\n", "bad.yml")


def test_values_keep_their_types():
    c = MergeConfiguration(merge_method="linear", models=[{"model": "m", "parameters": {
        "a": 1, "b": 1.0, "c": "1e-3", "d": True, "e": [1, 2.0, "x", False], "f": {"value": 1}}}])
    p = c.models[0].parameters
    assert [type(p[k]) for k in "abcd"] == [int, float, str, bool]
    assert [type(x) for x in p["e"]] == [int, float, str, bool]
    assert p["f"] == ConditionalParameter(value=1) and p["f"].filter is None
    s = InputSliceDefinition(model="m", layer_range=[0.0, "2"])
    assert s.layer_range == (0, 2) and all(type(x) is int for x in s.layer_range)
    assert OutputSliceDefinition(sources=[], residual_weight=1).residual_weight == 1.0
    assert TokenEmbeddingConfig(source="m", force="yes").force is True
    assert TokenizerConfig().source == "union" and TokenizerConfig(source="org/x").source == ModelReference.parse("org/x")
    assert c.tokenizer_source is None
    for s in ("union", "base"):
        assert MergeConfiguration(merge_method="x", models=[{"model": "m"}], tokenizer_source=s).tokenizer_source == s
    t = MergeConfiguration(merge_method="x", models=[{"model": "m"}], tokenizer_source={"model": "org/t"})
    assert t.tokenizer_source == ModelReference.parse("org/t")


def test_unknown_keys_are_ignored():
    # as pydantic's models: left out of the object and of every dump
    c = MergeConfiguration.model_validate({"merge_method": "x", "models": [{"model": "m", "weight": 1}], "foo": 1})
    assert c.to_yaml() == "merge_method: x\nmodels:\n- model: m"


@pytest.mark.parametrize("text,model,rev,lora,lrev", [
    ("org/model", "org/model", None, None, None),
    ("org/model+org/lora", "org/model", None, "org/lora", None),
    ("org/model@v1.0+org/lora@main", "org/model", "v1.0", "org/lora", "main"),
    ("/abs/path/to/model", "/abs/path/to/model", None, None, None),
    ("./rel/model+../adapters/a b", "./rel/model", None, "../adapters/a b", None),
])
def test_model_reference_round_trips(text, model, rev, lora, lrev):
    r = ModelReference.parse(text)
    assert (r.model.path, r.model.revision) == (model, rev)
    assert (r.lora.path, r.lora.revision) == (lora, lrev) if lora else r.lora is None
    assert r.override_architecture is None
    assert str(r) == text and ModelReference.parse(str(r)) == r
    assert hash(r) == hash(ModelReference.parse(text)) and len({r, ModelReference.parse(text)}) == 1
    assert r.model_dump() == text and r.model_dump(mode="json") == text
    assert ModelReference.model_validate(text) == r == ModelReference.model_validate(r.model_dump())
    assert r != ModelReference.parse(text + "x")


def test_model_reference_refusals_and_architecture():
    with pytest.raises(mk.ConfigError, match="more than one \\+"):
        ModelReference.parse("a+b+c")
    with pytest.raises(mk.ConfigError, match="more than one @"):
        ModelReference.parse("a@b@c")
    with pytest.raises(mk.ConfigError, match="frozen"):
        ModelReference.parse("a").lora = ModelPath(path="l")
    r = ModelReference(model="a@r", override_architecture="X")
    assert r.model == ModelPath(path="a", revision="r") and str(r) == "a@r"
    assert r.model_dump() == {"model": {"path": "a", "revision": "r"}, "lora": None, "override_architecture": "X"}
    assert repr(r) == ("ModelReference(model=ModelPath(path='a', revision='r'), lora=None, "
                       "override_architecture='X')")
    assert r != ModelReference.parse("a@r")


def test_referenced_models():
    c = build_objects()
    refs = c.referenced_models()
    assert [str(m) for m in refs] == ["testdata/models/conf/llama-f32-%s" % x for x in "abc"]
    m = build_tokenizer_modules()
    assert sorted(str(x) for x in m.referenced_models()) == ["org/base", "org/base@v2", "org/tuned@main+org/adapter"]
    lin = MergeConfiguration.model_validate({"merge_method": "linear", "base_model": "b",
                                             "models": [{"model": "a"}, {"model": "b"}, {"model": "a"}]})
    assert [str(x) for x in lin.referenced_models()] == ["b", "a"]


def test_mutation_is_checked_and_dumped():
    c = MergeConfiguration.model_validate({"merge_method": "linear", "models": [{"model": "a"}]})
    c.base_model = "org/base"  # made a ModelReference, as the field holds
    assert c.base_model == ModelReference.parse("org/base")
    with pytest.raises(mk.ConfigError, match="dtype: expected a string"):
        c.dtype = 16
    with pytest.raises(ValueError, match='no field "colour"'):
        c.colour = "red"
    c.models[0].parameters = {"weight": [0, 1]}
    c.models.append(InputModelDefinition(model="b"))
    assert c.to_yaml() == ("base_model: org/base\nmerge_method: linear\nmodels:\n- model: a\n"
                           "  parameters:\n    weight: [0, 1]\n- model: b")
    copy = c.model_copy(update={"dtype": "float16"})
    assert copy.dtype == "float16" and c.dtype is None and copy.models is c.models
    assert c.model_copy(deep=True) == c and c.model_copy(deep=True).models is not c.models
    with pytest.raises(TypeError):
        hash(c)


def test_source_is_the_text_until_changed():
    text = open("testdata/configs/ties.yml").read()
    c = MergeConfiguration.from_yaml(text, "ties.yml")
    assert c._source() == (text, "ties.yml")
    c.models[1].parameters["density"] = 0.5  # changed in place: its YAML now
    assert c._source() == (c.to_yaml(), "config") and "density: 0.5" in c.to_yaml()
    d = MergeConfiguration.model_validate(yaml.safe_load(text))
    assert d._source() == (d.to_yaml(), "config")
    # run_merge's config_source: taken when it holds this configuration
    assert d._source(text) == (text, "config_source")
    assert d._source("merge_method: linear\nmodels: [{model: x}]\n") == (d.to_yaml(), "config")


def test_evaluate_setting():
    f = float
    assert evaluate_setting("x", 0.5, validate=f) == 0.5
    assert evaluate_setting("x", [0, 1], 0.25, validate=f) == 0.25
    assert abs(evaluate_setting("x", [0, 0.5, 0.3, 0.7, 1], 0.6, validate=f) - 0.46) < 1e-12
    assert evaluate_setting("x", ["a", "b", "c"], 0.9, validate=str) == "b"
    conds = [ConditionalParameter(value=[0, 1], filter="self_attn"), ConditionalParameter(value=0.5)]
    assert evaluate_setting("model.layers.0.self_attn.q_proj.weight", conds, 1.0, validate=f) == 1.0
    assert evaluate_setting("model.layers.0.mlp.up_proj.weight", conds, 1.0, validate=f) == 0.5
    assert evaluate_setting("x", [ConditionalParameter(value=1, filter="mlp")], validate=f) is None
    assert evaluate_setting("x", [], validate=f) is None


def test_config_reader_precedence():
    c = build_objects()
    r = ConfigReader(config=c, t=0)
    s = r.for_out_slice(c.slices[0]).with_t(0.5)
    assert r.slice_out is None and s.t == 0.5 and s.base_model == c.base_model
    src = list(s.parameter_sources(c.slices[0].sources[1].model))
    assert src == [{"weight": [0.3, 0.5, 0.7]}, None, c.parameters]


def test_parse_kmb():
    assert [parse_kmb(x) for x in ("250", "20k", "5M", "1b", 7)] == [250, 20000, 5000000, 1000000000, 7]
    with pytest.raises(ValueError):
        parse_kmb("1x")


WRITTEN = json.load(open("testdata/python/run-merge-written.json"))


@pytest.mark.parametrize("name", sorted(WRITTEN))
def test_run_merge_writes_mergekits_config_text(name, tmp_path):
    # a configuration given as a dict or an object: mergekit's run_merge
    # writes to_yaml() of it as its planner rewrote it (the golden);
    # one from YAML text: the text, as mergekit-yaml writes it
    rec = WRITTEN[name]
    for how, cfg in (("dict", rec["config"]), ("object", MergeConfiguration.model_validate(rec["config"]))):
        out = tmp_path / how
        mk.run_merge(cfg, str(out), options=mk.MergeOptions(copy_tokenizer=False, quiet=True))
        assert (out / "mergekit_config.yml").read_text() == rec["written"]
        assert rec["written"] in (out / "README.md").read_text()
    text = yaml.safe_dump(rec["config"])
    out = tmp_path / "text"
    mk.run_merge(MergeConfiguration.from_yaml(text, name), str(out),
                 options=mk.MergeOptions(copy_tokenizer=False, quiet=True))
    assert (out / "mergekit_config.yml").read_text() == text
