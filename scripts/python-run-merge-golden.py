"""What mergekit 0.1.5's run_merge writes into mergekit_config.yml for
configurations given as dicts (its planner rewrites them first), for
test/python/test_config.py: testdata/python/run-merge-written.json.
Run by hand from the repository's root with the conformance venv's python
(mergekit 0.1.5, torch): not part of make check."""
import json
import os
import tempfile

from mergekit.config import MergeConfiguration
from mergekit.merge import run_merge
from mergekit.options import MergeOptions

A, B = "testdata/models/tiny-a", "testdata/models/tiny-b"
CONFIGS = {
    "linear": {"merge_method": "linear", "models": [{"model": A, "parameters": {"weight": 0.4}},
                                                    {"model": B, "parameters": {"weight": 0.6}}], "dtype": "float32"},
    "slerp-base-listed": {"merge_method": "slerp", "base_model": A, "models": [{"model": A}, {"model": B}],
                          "parameters": {"t": [{"filter": "mlp", "value": 0.3}, {"value": 0.6}]},
                          "dtype": "bfloat16"},
    "ties-base-added": {"merge_method": "ties", "base_model": A,
                        "models": [{"model": B, "parameters": {"weight": 1.0, "density": 0.5}}],
                        "parameters": {"normalize": True}, "dtype": "float32"},
    "passthrough-slices": {"merge_method": "passthrough", "slices": [
        {"sources": [{"model": A, "layer_range": [0, 1]}]}, {"sources": [{"model": B, "layer_range": [1, 2]}]}],
        "dtype": "float32"},
}
out = {}
with tempfile.TemporaryDirectory() as tmp:
    for name, cfg in CONFIGS.items():
        d = os.path.join(tmp, name)
        run_merge(MergeConfiguration.model_validate(cfg), d, options=MergeOptions(copy_tokenizer=False, quiet=True))
        out[name] = {"config": cfg, "written": open(os.path.join(d, "mergekit_config.yml")).read()}
with open("testdata/python/run-merge-written.json", "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
    f.write("\n")
