"""Configurations built from the data classes, written once for either
package: each builder takes k, a namespace holding the classes of
mergekit's or mk's config and common modules (and yaml).  Used by
scripts/python-config-golden.py (mergekit) and test/python/
test_config.py (mk)."""
import yaml


def plain(v):
    """v with tuples as lists, recursively (a dump as JSON holds it)."""
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v


def namespace(root):
    """The classes the builders use, from root ("mergekit" or "mk")."""
    import importlib
    import types
    config = importlib.import_module(root + ".config")
    common = importlib.import_module(root + ".common")
    tok = importlib.import_module(root + ".tokenizer.config") if root == "mergekit" else config
    names = {n: getattr(config, n) for n in ("ConditionalParameter", "InputModelDefinition", "InputSliceDefinition",
                                             "MergeConfiguration", "OutputModuleDefinition",
                                             "OutputSliceDefinition")}
    names.update({n: getattr(common, n) for n in ("ModelPath", "ModelReference")})
    names.update({n: getattr(tok, n) for n in ("ModelTokenEmbedding", "TokenEmbeddingConfig", "TokenizerConfig",
                                              "ZeroEmbedding")})
    return types.SimpleNamespace(**names)


def build_objects(k):
    """Three models' slices with gradients and filtered parameters."""
    models = ["testdata/models/conf/llama-f32-a", "testdata/models/conf/llama-f32-b",
              "testdata/models/conf/llama-f32-c"]
    weights = [[0.2, 0.5, 0.8], [0.3, 0.5, 0.7], [0.5, 0, 0.1]]
    sources = [k.InputSliceDefinition(model=m, layer_range=(0, 3), parameters={"weight": w})
               for m, w in zip(models, weights)]
    return k.MergeConfiguration(
        merge_method="ties",
        slices=[k.OutputSliceDefinition(sources=sources)],
        base_model=k.ModelReference.parse(models[0]),
        parameters={
            "density": [k.ConditionalParameter(value=[0.25, 0.5, 0.75], filter="self_attn"),
                        k.ConditionalParameter(value=[0.75, 0.5, 0.25], filter="mlp"),
                        k.ConditionalParameter(value=0.5)],
            "normalize": True,
            "epsilon": 1e-5,
        },
        dtype="float32",
    )


def build_tokenizer_modules(k):
    """Modules, a tokenizer of every token kind, LoRA, revisions, an
    architecture override, a residual weight given as an integer."""
    a = k.ModelReference(model=k.ModelPath(path="org/base", revision="v2"), override_architecture="LlamaForCausalLM")
    b = k.ModelReference.parse("org/tuned@main+org/adapter")
    return k.MergeConfiguration(
        merge_method="linear",
        modules={
            "text": k.OutputModuleDefinition(models=[k.InputModelDefinition(model=a, parameters={"weight": 0.7}),
                                                   k.InputModelDefinition(model=b, parameters={"weight": 0.3})]),
            "vision": k.OutputModuleDefinition(slices=[k.OutputSliceDefinition(
                sources=[k.InputSliceDefinition(model="org/base", layer_range=[0, 4])], residual_weight=1,
                base_model="org/base")], parameters={"weight": 1}),
        },
        tokenizer=k.TokenizerConfig(source="base", pad_to_multiple_of=64, tokens={
            "<|im_start|>": k.TokenEmbeddingConfig(source=k.ModelTokenEmbedding(kind="model_token", model=b,
                                                                            token="<s>"), force=True),
            "<pad>": k.TokenEmbeddingConfig(source=k.ZeroEmbedding(kind="zero")),
            "<tool>": k.TokenEmbeddingConfig(source="org/tuned"),
            "<x>": k.TokenEmbeddingConfig()}),
        chat_template="chatml",
        out_dtype="bfloat16",
    )


def build_mutated(k):
    """testdata/configs/linear.yml, then changed in place."""
    c = k.MergeConfiguration.model_validate(yaml.safe_load(open("testdata/configs/linear.yml")))
    c.dtype = "bfloat16"
    c.models.append(k.InputModelDefinition(model="testdata/models/tiny-a+org/lora", parameters={"weight": 0.25}))
    c.models[0].parameters["weight"] = [1, 0.5]
    c.parameters = None
    c.tokenizer_source = "union"
    return c


BUILDERS = {"build_objects": build_objects, "build_tokenizer_modules": build_tokenizer_modules,
            "build_mutated": build_mutated}
