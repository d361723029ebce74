"""moe_compare.py MK_OUT MERGEKIT_OUT [--random | --router-tol T] [--load]

Compare an mk-moe output with mergekit-moe's for the same configuration,
tensor by tensor and by name, bit for bit (Mixtral's and Qwen3-MoE's
experts in the fused transformers-v5 layout both write,
experts.gate_up_proj [E, 2I, H] and experts.down_proj [E, H, I]).  --random: the router weights come from different generators
(mk's counter RNG, torch's), so only their shapes and dtypes are compared; --router-tol T: the routers
agree within max|mk - mergekit| <= T (computed in float32 in another
order, or from mergekit's bfloat16 forward pass).
--load: load MK_OUT with transformers and generate a few tokens, and
compare its logits with MERGEKIT_OUT's on one prompt (no weight missing
or unexpected; the test models' MLPs move the logits little, so this
is a loading check more than a numeric one) (within 1e-4 when the
routers agree within 1e-6).
--load-deepseek: the same for a DeepSeek MoE output, which transformers
cannot load as it is: its config.json (model_type "deepseek", as
mergekit-moe writes it) names modelling code on the Hub (auto_map,
trust_remote_code), and transformers 5 has no class of its own for that
model type (deepseek_v2 / deepseek_v3 are another attention, MLA, and
another router).  Offline, the weights go instead into transformers' own
DeepSeek-OCR-2 text decoder (DeepseekOcr2TextModel: the same llama
attention, a softmax router taking the top k, the shared experts added),
which computes what DeepSeek MoE does when its top-k weights need no
renormalisation (norm_topk_prob with every expert chosen, k = n, or
norm_topk_prob false): checked, else refused.  Every tensor of MK_OUT must
land in that model (strict), then it generates greedily, lm_head applied
by hand.  Exit 0 when all agree.
"""
import json
import re
import sys

import torch
from safetensors import safe_open


def load(d):
    idx = d + "/model.safetensors.index.json"
    try:
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    except FileNotFoundError:
        files = ["model.safetensors"]
    out = {}
    for f in files:
        with safe_open(d + "/" + f, "pt") as s:
            for k in s.keys():
                out[k] = s.get_tensor(k)
    return out


def deepseek_as_ocr2(d):
    """A DeepSeek MoE checkpoint d (config.json, weights) as transformers'
    DeepseekOcr2TextModel with its weights loaded strictly, and lm_head."""
    from transformers.models.deepseek_ocr2 import modeling_deepseek_ocr2 as m
    from transformers.models.deepseek_ocr2.configuration_deepseek_ocr2 import DeepseekOcr2TextConfig
    c = json.load(open(d + "/config.json"))
    n, k = c["n_routed_experts"], c["num_experts_per_tok"]
    why = []
    if c.get("norm_topk_prob") and k != n:
        why.append(f"norm_topk_prob with {k} of {n} experts (the stand-in does not renormalise)")
    if c.get("scoring_func", "softmax") != "softmax":
        why.append(f"scoring_func {c.get('scoring_func')}")
    if c.get("first_k_dense_replace", 0) != 0 or c.get("moe_layer_freq", 1) != 1:
        why.append("dense layers")
    if not c.get("n_shared_experts"):
        why.append("no shared expert (the stand-in always has them)")
    if c.get("rope_scaling"):
        why.append("rope_scaling")
    if why:
        raise SystemExit("load-deepseek: " + "; ".join(why))
    L = c["num_hidden_layers"]
    cfg = DeepseekOcr2TextConfig(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
        num_hidden_layers=L, num_attention_heads=c["num_attention_heads"],
        num_key_value_heads=c.get("num_key_value_heads"), rms_norm_eps=c["rms_norm_eps"],
        max_position_embeddings=c.get("max_position_embeddings", 2048),
        rope_parameters={"rope_type": "default", "rope_theta": c.get("rope_theta", 10000.0)},
        attention_bias=c.get("attention_bias", False), n_routed_experts=n, num_experts_per_tok=k,
        n_shared_experts=c["n_shared_experts"], moe_intermediate_size=c["moe_intermediate_size"],
        routed_scaling_factor=1.0, topk_method="greedy", mlp_layer_types=["sparse"] * L)
    model = m.DeepseekOcr2TextModel(cfg).float().eval()
    w = load(d)
    sd, used = {}, set()
    for name, t in w.items():
        if name == "lm_head.weight" or not name.startswith("model."):
            continue
        x = re.match(r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.", name)
        if x:
            continue
        sd[name[len("model."):]] = t.float()
        used.add(name)
    for l in range(L):
        gu, dn = [], []
        for e in range(n):
            p = f"model.layers.{l}.mlp.experts.{e}."
            gu.append(torch.cat([w[p + "gate_proj.weight"], w[p + "up_proj.weight"]], 0).float())
            dn.append(w[p + "down_proj.weight"].float())
            used.update(p + q + ".weight" for q in ("gate_proj", "up_proj", "down_proj"))
        sd[f"layers.{l}.mlp.experts.gate_up_proj"] = torch.stack(gu)
        sd[f"layers.{l}.mlp.experts.down_proj"] = torch.stack(dn)
    used.add("lm_head.weight")
    r = model.load_state_dict(sd, strict=False)
    problems = [f"missing {x}" for x in r.missing_keys] + [f"unexpected {x}" for x in r.unexpected_keys]
    problems += [f"unused {x}" for x in sorted(set(w) - used)]
    return model, w["lm_head.weight"].float(), problems


def load_deepseek(mk_dir, mg_dir):
    bad = 0
    model, head, problems = deepseek_as_ocr2(mk_dir)
    for p in problems[:8]:
        print(f"LOAD {p}")
    bad += len(problems)
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        for _ in range(4):   # greedy, the whole sequence each step
            h = model(input_ids=ids).last_hidden_state
            ids = torch.cat([ids, (h[:, -1] @ head.T).argmax(-1, keepdim=True)], 1)
        ref, rhead, _ = deepseek_as_ocr2(mg_dir)
        x = torch.tensor([[1, 2, 3, 4, 5, 6]])
        lg = model(input_ids=x).last_hidden_state @ head.T
        d = (lg - ref(input_ids=x).last_hidden_state @ rhead.T).abs().max().item()
    if not torch.isfinite(lg).all():
        print("LOAD logits not finite")
        bad += 1
    print(f"load: {type(model).__name__} (as DeepSeek MoE) generated {ids.tolist()}; "
          f"max|logits - mergekit-moe's| {d:.3g}")
    return bad


def bits(t):
    return t.contiguous().view(torch.uint8) if t.numel() else t


def main():
    argv = sys.argv[1:]
    rtol = None
    if "--router-tol" in argv:
        i = argv.index("--router-tol")
        rtol = float(argv[i + 1])
        del argv[i:i + 2]
    args = [a for a in argv if not a.startswith("--")]
    rnd = "--random" in argv
    mk, mg = load(args[0]), load(args[1])
    used, bad = set(), 0
    for name, ref in mg.items():
        got = mk.get(name)
        used.add(name)
        if got is None:
            print(f"MISSING {name}")
            bad += 1
            continue
        router = name.endswith("mlp.gate.weight") or name.endswith("shared_expert_gate.weight")
        same_shape = got.shape == ref.shape and got.dtype == ref.dtype
        if router and rnd:
            ok, how = same_shape, " (router: shape and dtype only)"
        elif router and rtol is not None:
            d = (got.float() - ref.float()).abs().max().item() if same_shape else float("inf")
            ok, how = d <= rtol, f" (router: max|diff| {d:.3g}, tol {rtol:g})"
        else:
            ok, how = same_shape and torch.equal(bits(got), bits(ref)), ""
        print(f"{'ok  ' if ok else 'DIFF'} {name} {tuple(ref.shape)} {ref.dtype}{how}")
        bad += not ok
    for name in sorted(set(mk) - used):
        print(f"EXTRA {name}")
        bad += 1
    if "--load" in sys.argv:
        import transformers
        model, info = transformers.AutoModelForCausalLM.from_pretrained(args[0], output_loading_info=True)
        # every weight the model has comes from the checkpoint, and every
        # tensor of the checkpoint lands in the model
        for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
            if info.get(k):
                print(f"LOAD {k}: {sorted(info[k])[:8]}")
                bad += 1
        out = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=4, do_sample=False)
        # the same forward pass of mergekit-moe's output: logits agree as
        # closely as the routers do
        ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
        ref = transformers.AutoModelForCausalLM.from_pretrained(args[1])
        with torch.no_grad():
            d = (model(ids).logits.float() - ref(ids).logits.float()).abs().max().item()
        print(f"load: {type(model).__name__} generated {out.tolist()}; max|logits - mergekit-moe's| {d:.3g}")
        if rtol is not None and rtol <= 1e-6 and d > 1e-4:
            print("DIFF logits")
            bad += 1
    if "--load-deepseek" in sys.argv:
        bad += load_deepseek(args[0], args[1])
    print(f"{'PASS' if not bad else 'FAIL'}: {len(mg)} tensors, {bad} differ")
    sys.exit(1 if bad else 0)


main()
