#!/usr/bin/env python3
"""quant-ties-conformance.py - ties and DARE-free sparsification on block-FP8
models at density < 1, mk against mergekit, in the reference venv,
outside `make check`:

  ~/.cache/mk/mergekit-0.1.5-venv/bin/python scripts/quant-ties-conformance.py build

Three llama-shaped block-FP8 models (mk-gen-model --quantized fp8) are
dequantized by transformers (FineGrainedFP8Config(dequantize=True)) and
merged by mergekit-yaml with ties (and breadcrumbs_ties) at densities 0.3,
0.5, 0.7 in float32; mk-yaml merges the FP8 models themselves.  FP8
values repeat (256 codes times a block's scale), so a magnitude cut often
falls among equal magnitudes, where torch leaves unspecified which are
kept and mk keeps the lower indices (mk-compat(7)).  The check: every
element where mk's merge differs from mergekit's lies where at least one
model's |delta| equals its own cut magnitude (the tie mk and torch may
settle differently); every other element within 1e-6 of the largest
magnitude.  The counts are printed; exit 1 on a difference not so
explained.
"""
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import importlib.util  # noqa: E402
spec = importlib.util.spec_from_file_location("qg", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                 "quant-golden.py"))
qg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(qg)


def cuts(delta, density, gamma):
    """The magnitudes at which a cut falls: ties keep the int(density * n)
    largest; breadcrumbs (gamma) keeps the sorted range [n_bot, n_bot +
    target) with n_bot = n - target - int(gamma * n) (mergekit's rule)."""
    s = delta.abs().flatten().sort().values
    n, target = s.numel(), int(density * delta.numel())
    if gamma is None:
        return [s[n - target]] if 0 < target <= n else []
    n_bot = n - target - int(gamma * n)
    return [s[i] for i in (n_bot - 1, n_bot, n_bot + target - 1, n_bot + target) if 0 <= i < n]


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
    venv_bin = os.path.dirname(sys.executable)
    bad = 0
    with tempfile.TemporaryDirectory() as w:
        fp8, dq = [], []
        for s in (1, 2, 3):
            q, d = os.path.join(w, "q%d" % s), os.path.join(w, "d%d" % s)
            qg.gen(os.path.join(build, "tools", "mk-gen-model"), q, s, True)
            qg.dequantize(q, d)
            fp8.append(q)
            dq.append(d)
        D = [load_file(os.path.join(d, "model.safetensors")) for d in dq]
        for method in ("ties", "breadcrumbs_ties"):
            for dens in (0.3, 0.5, 0.7):
                extra = ", gamma: 0.01" if method == "breadcrumbs_ties" else ""
                y = ("merge_method: %s\nbase_model: %%s\ndtype: float32\nmodels:\n  - model: %%s\n"
                     "  - model: %%s\n    parameters: {weight: 0.7, density: %s%s}\n"
                     "  - model: %%s\n    parameters: {weight: 0.5, density: %s%s}\n") % (method, dens, extra,
                                                                                      dens, extra)
                ym, yk = os.path.join(w, "m.yml"), os.path.join(w, "k.yml")
                open(yk, "w").write(y % (dq[0], dq[0], dq[1], dq[2]))
                open(ym, "w").write(y % (fp8[0], fp8[0], fp8[1], fp8[2]))
                ko, mo = os.path.join(w, "k-out"), os.path.join(w, "m-out")
                subprocess.run([os.path.join(venv_bin, "mergekit-yaml"), yk, ko, "--no-copy-tokenizer"],
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                subprocess.run([os.path.join(build, "bin", "mk-yaml"), "--quiet", "--force", ym, mo], check=True)
                K, M = load_file(os.path.join(ko, "model.safetensors")), load_file(os.path.join(mo, "model.safetensors"))
                ndiff = nties = nel = 0
                for name, kv in K.items():
                    mv = M[name].float()
                    kv = kv.float()
                    nel += kv.numel()
                    tol = 1e-6 * max(float(kv.abs().max()), 1e-30)
                    diff = (mv - kv).abs() > tol
                    if not diff.any():
                        continue
                    tied = torch.zeros_like(diff)
                    for m in (1, 2):
                        delta = D[m][name].float() - D[0][name].float()
                        for c in cuts(delta, dens, 0.01 if method == "breadcrumbs_ties" else None):
                            tied |= delta.abs() == c
                    unexplained = int((diff & ~tied).sum())
                    ndiff += int(diff.sum())
                    nties += int((diff & tied).sum())
                    if unexplained:
                        print("%s d=%s %s: %d elements differ away from a tie at a cut" % (method, dens, name,
                                                                                            unexplained))
                        bad += 1
                print("%s density %.1f: %d of %d elements differ from mergekit, all at a tie at a magnitude cut "
                      "(%d)" % (method, dens, ndiff, nel, nties) if ndiff == nties else
                      "%s density %.1f: %d differ, %d explained" % (method, dens, ndiff, nties))
    print("quant-ties-conformance: %s" % ("ok" if not bad else "%d tensors differ" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
