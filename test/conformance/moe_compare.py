"""moe_compare.py MK_OUT MERGEKIT_OUT [--random | --router-tol T] [--load]

Compare an mk-moe output with mergekit-moe's for the same configuration,
tensor by tensor, bit for bit.  mk writes each expert's weights under
per-expert names (transformers converts them on load); where mergekit
wrote the fused transformers-v5 layout (experts.gate_up_proj [E, 2I, H],
experts.down_proj [E, H, I]) mk's tensors are stacked the same way before
comparing.  --random: the router weights come from different generators
(mk's counter RNG, torch's), so only their shapes and dtypes are compared; --router-tol T: the routers
agree within max|mk - mergekit| <= T (computed in float32 in another
order, or from mergekit's bfloat16 forward pass).
--load: load MK_OUT with transformers and generate a few tokens, and
compare its logits with MERGEKIT_OUT's on one prompt (no weight missing
or unexpected; the test models' MLPs move the logits little, so this
is a loading check more than a numeric one) (within 1e-4 when the
routers agree within 1e-6; not for DeepSeek MoE, which needs the Hub's
remote code).  Exit 0 when all agree.
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
        m = re.match(r"(.*\.mlp)\.experts\.(gate_up_proj|down_proj)$", name)
        if m:
            pre, kind = m.groups()
            e, parts = 0, []
            while True:
                names = [f"{pre}.experts.{e}.{p}.weight" for p in
                         (("w1", "w3") if kind == "gate_up_proj" else ("w2",))]
                if names[0] not in mk:
                    names = [f"{pre}.experts.{e}.{p}.weight" for p in
                             (("gate_proj", "up_proj") if kind == "gate_up_proj" else ("down_proj",))]
                if names[0] not in mk:
                    break
                parts.append(torch.cat([mk[n] for n in names], 0))
                used.update(names)
                e += 1
            got = torch.stack(parts) if parts else None
        else:
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
    print(f"{'PASS' if not bad else 'FAIL'}: {len(mg)} tensors, {bad} differ")
    sys.exit(1 if bad else 0)


main()
