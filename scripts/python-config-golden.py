#!/usr/bin/env python3
"""Writes testdata/python/config/: mergekit 0.1.5's model_dump and
to_yaml of every configuration in testdata/configs/ and
test/conformance/ it accepts, and of configurations built from its data
classes.  test/python/test_config.py builds the same with mk.config and
compares.  Run by hand from the repository's root with mergekit's
Python (not part of make check):

    ~/.cache/mk/mergekit-0.1.5-venv/bin/python scripts/python-config-golden.py

For each NAME: NAME.json ({"source": ..., "model_dump": model_dump(
mode="json"), "model_dump_python": model_dump() with tuples as lists,
"exclude_none": model_dump(mode="json", exclude_none=True),
"model_dump_json": model_dump_json(), "referenced_models": sorted
str()s}) and NAME.yml (to_yaml(), exactly)."""
import glob
import json
import os
import sys

import yaml
from mergekit.config import (ConditionalParameter, InputModelDefinition, InputSliceDefinition, MergeConfiguration,
                             OutputModuleDefinition, OutputSliceDefinition)
from mergekit.common import ModelPath, ModelReference
from mergekit.tokenizer.config import ModelTokenEmbedding, TokenEmbeddingConfig, TokenizerConfig, ZeroEmbedding

OUT = "testdata/python/config"


# The builders below are repeated in test/python/test_config.py with mk's
# import root: keep the two the same.
def build_objects():
    """Three models' slices with gradients and filtered parameters."""
    models = ["testdata/models/conf/llama-f32-a", "testdata/models/conf/llama-f32-b",
              "testdata/models/conf/llama-f32-c"]
    weights = [[0.2, 0.5, 0.8], [0.3, 0.5, 0.7], [0.5, 0, 0.1]]
    sources = [InputSliceDefinition(model=m, layer_range=(0, 3), parameters={"weight": w})
               for m, w in zip(models, weights)]
    return MergeConfiguration(
        merge_method="ties",
        slices=[OutputSliceDefinition(sources=sources)],
        base_model=ModelReference.parse(models[0]),
        parameters={
            "density": [ConditionalParameter(value=[0.25, 0.5, 0.75], filter="self_attn"),
                        ConditionalParameter(value=[0.75, 0.5, 0.25], filter="mlp"),
                        ConditionalParameter(value=0.5)],
            "normalize": True,
            "epsilon": 1e-5,
        },
        dtype="float32",
    )


def build_tokenizer_modules():
    """Modules, a tokenizer of every token kind, LoRA, revisions, an
    architecture override, a residual weight given as an integer."""
    a = ModelReference(model=ModelPath(path="org/base", revision="v2"), override_architecture="LlamaForCausalLM")
    b = ModelReference.parse("org/tuned@main+org/adapter")
    return MergeConfiguration(
        merge_method="linear",
        modules={
            "text": OutputModuleDefinition(models=[InputModelDefinition(model=a, parameters={"weight": 0.7}),
                                                   InputModelDefinition(model=b, parameters={"weight": 0.3})]),
            "vision": OutputModuleDefinition(slices=[OutputSliceDefinition(
                sources=[InputSliceDefinition(model="org/base", layer_range=[0, 4])], residual_weight=1,
                base_model="org/base")], parameters={"weight": 1}),
        },
        tokenizer=TokenizerConfig(source="base", pad_to_multiple_of=64, tokens={
            "<|im_start|>": TokenEmbeddingConfig(source=ModelTokenEmbedding(kind="model_token", model=b,
                                                                            token="<s>"), force=True),
            "<pad>": TokenEmbeddingConfig(source=ZeroEmbedding(kind="zero")),
            "<tool>": TokenEmbeddingConfig(source="org/tuned"),
            "<x>": TokenEmbeddingConfig()}),
        chat_template="chatml",
        out_dtype="bfloat16",
    )


def build_mutated():
    """testdata/configs/linear.yml, then changed in place."""
    c = MergeConfiguration.model_validate(yaml.safe_load(open("testdata/configs/linear.yml")))
    c.dtype = "bfloat16"
    c.models.append(InputModelDefinition(model="testdata/models/tiny-a+org/lora", parameters={"weight": 0.25}))
    c.models[0].parameters["weight"] = [1, 0.5]
    c.parameters = None
    c.tokenizer_source = "union"
    return c


def plain(v):
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v


def write(name, source, c):
    rec = {"source": source, "model_dump": c.model_dump(mode="json"), "model_dump_python": plain(c.model_dump()),
           "exclude_none": c.model_dump(mode="json", exclude_none=True), "model_dump_json": c.model_dump_json(),
           "referenced_models": sorted(str(m) for m in c.referenced_models())}
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True, allow_nan=False)
        f.write("\n")
    with open(os.path.join(OUT, name + ".yml"), "w") as f:
        f.write(c.to_yaml())


def main():
    os.makedirs(OUT, exist_ok=True)
    n = 0
    for path in sorted(glob.glob("testdata/configs/*.yml")) + sorted(glob.glob("test/conformance/*.yml")):
        try:
            c = MergeConfiguration.model_validate(yaml.safe_load(open(path)))
        except Exception as e:  # noqa: BLE001 - report and skip what mergekit refuses
            print("%s: refused by mergekit: %s" % (path, str(e).splitlines()[0]), file=sys.stderr)
            continue
        write(path.split("/")[-2] + "-" + os.path.basename(path)[:-4], path, c)
        n += 1
    for name, fn in (("objects", build_objects), ("objects-tokenizer-modules", build_tokenizer_modules),
                     ("mutated", build_mutated)):
        write(name, fn.__name__, fn())
        n += 1
    print("%d configurations written to %s" % (n, OUT))


if __name__ == "__main__":
    main()
