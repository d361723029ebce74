# Golden outputs of mergekit 0.1.5 for test/python/test_options.py and test_modules.py:
#   MERGEKIT_VENV/bin/python scripts/python-api-golden.py testdata/golden/python-api .
# (run outside `make check`: it needs mergekit, torch and transformers)
import json, os, sys
import numpy as np
import torch
from mergekit.options import MergeOptions
from mergekit.config import MergeConfiguration
from mergekit.card import generate_card
from mergekit.architecture import arch_info_for_config
from mergekit import sparsify as sp
import transformers
out = sys.argv[1]
top = sys.argv[2]
# options
cases = [{}, {"gpu_rich": True}, {"cuda": True}, {"out_shard_size": "2000"},
         {"out_shard_size": 12345}, {"device": "cpu", "cuda": True},
         {"random_seed": 5, "num_threads": 3, "verbosity": 2, "write_threads": 4},
         {"copy_tokenizer": False, "write_model_card": False, "safe_serialization": False, "lazy_unpickle": True}]
json.dump([{"kw": c, "dump": MergeOptions(**c).model_dump()} for c in cases], open(out + "/options.json", "w"), indent=1)
# cards: hub-like names that do not exist locally (mergekit asks the Hub only for existing paths)
cards = []
for cfg, name in [
    ({"merge_method": "slerp", "base_model": "org/base", "models": [{"model": "org/base"}, {"model": "org/tuned"}],
      "parameters": {"t": 0.5}, "dtype": "bfloat16"}, "my-merge"),
    ({"merge_method": "ties", "base_model": "org/base", "models": [{"model": "org/a", "parameters": {"weight": 1.0, "density": 0.5}},
      {"model": "org/b+lora/x", "parameters": {"weight": 0.5, "density": 0.5}}], "dtype": "float16"}, None),
    ({"merge_method": "linear", "models": [{"model": "/abs/a", "parameters": {"weight": 1.0}}, {"model": "org/b", "parameters": {"weight": 1.0}}]}, "x"),
    ({"merge_method": "task_arithmetic", "base_model": "org/base", "models": [{"model": "org/a", "parameters": {"weight": 0.3}}]}, ""),
]:
    c = MergeConfiguration.model_validate(cfg)
    y = c.to_yaml()
    cards.append({"config": cfg, "yaml": y, "name": name, "card": generate_card(c, y, name)})
json.dump(cards, open(out + "/cards.json", "w"), indent=1)
# architecture: the weights of the tiny llama model
hf = transformers.AutoConfig.from_pretrained(top + "/testdata/models/tiny-a")
arch = arch_info_for_config(hf)
json.dump([w.model_dump(mode="json") for w in arch.all_weights(hf)], open(out + "/arch-tiny-a.json", "w"), indent=1)
# sparsify: deterministic methods on a fixed f32 tensor
rng = np.random.default_rng(7)
x = rng.standard_normal((8, 16)).astype(np.float32)
x[0, :4] = 0.5  # ties
np.save(out + "/sparsify-in.npy", x)
t = torch.from_numpy(x)
res = {}
for norm in [None, "l1", "l2", "linf"]:
    rn = sp.RescaleNorm(norm) if norm else None
    for d in [0.0, 0.1, 0.5, 0.9, 1.0]:
        res["magnitude/%s/%s" % (norm, d)] = sp.sparsify(t, d, sp.SparsificationMethod.magnitude, rescale_norm=rn).numpy().tolist()
        res["magnitude_outliers/%s/%s" % (norm, d)] = sp.sparsify(t, d, sp.SparsificationMethod.magnitude_outliers, gamma=0.05, rescale_norm=rn).numpy().tolist()
json.dump(res, open(out + "/sparsify.json", "w"))
