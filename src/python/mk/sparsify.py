"""Sparsification (mergekit.sparsify's names), computed with numpy.

The functions take numpy arrays (or anything np.asarray takes) and return
numpy arrays of the input's dtype; a torch tensor is taken too and a
tensor of its dtype and device returned (bfloat16 through float32).
They mask as mergekit's do, with these differences:

* Ties in magnitude are broken by position (a stable sort: of equal
  magnitudes the first kept by magnitude(), the first dropped by
  magnitude_outliers()); torch's sort leaves that order unspecified.
* bernoulli() (method "random") and della_magprune() draw from numpy's
  generator (rng: a numpy Generator or a seed; None: numpy's global
  state), not torch's, so their masks differ from mergekit's for the same
  seed, with the same distribution.  libmk's dare and della merges use
  their own generator (mk-compat(7)); these functions are for Python code.

The norms that rescale() matches are summed in float64 and rounded to the
tensor's dtype (torch sums in float32 for 16-bit tensors and rounds too):
the scale can differ from mergekit's by an ulp of that dtype.
"""
from enum import Enum

import numpy as np

__all__ = ["SparsificationMethod", "RescaleNorm", "rescaled_masked_tensor", "magnitude", "magnitude_outliers",
           "bernoulli", "della_magprune", "sparsify"]


class SparsificationMethod(str, Enum):
    magnitude = "magnitude"
    random = "random"
    magnitude_outliers = "magnitude_outliers"
    della_magprune = "della_magprune"


class RescaleNorm(str, Enum):
    l1 = "l1"
    l2 = "l2"
    linf = "linf"


def _in(tensor):
    """(array, back): the tensor as a numpy array, and how to turn a
    result into the caller's kind again."""
    if type(tensor).__module__.startswith("torch"):
        import torch
        dt, dev = tensor.dtype, tensor.device
        a = tensor.detach().to("cpu")
        if dt == torch.bfloat16:
            a = a.float()
        return a.numpy(), lambda r: torch.from_numpy(np.ascontiguousarray(r)).to(dtype=dt, device=dev)
    a = np.asarray(tensor)
    return a, lambda r: r


def _work(a):
    # 16-bit floats are computed as float32, as torch does on the CPU
    return np.float32 if a.dtype == np.float16 else a.dtype


def _norm(a, norm):
    x = np.abs(a.astype(np.float64))
    if norm == RescaleNorm.l1:
        v = x.sum()
    elif norm == RescaleNorm.l2:
        v = np.sqrt((x * x).sum())
    elif norm == RescaleNorm.linf:
        v = x.max() if x.size else 0.0
    else:
        raise NotImplementedError(norm)
    return a.dtype.type(v)


def _rescaled(a, mask, norm, eps):
    masked = a * mask.astype(a.dtype)
    if norm is None:
        return masked
    norm = RescaleNorm(norm)
    before, after = _norm(a, norm), _norm(masked, norm)
    if before < eps or after < eps:
        return masked
    with np.errstate(over="ignore"):
        return (masked * (before / after)).astype(a.dtype)


def rescaled_masked_tensor(tensor, mask, norm, eps=1e-7):
    """tensor * mask, scaled so that its norm (l1, l2, linf; None: no
    scaling) is the tensor's, unless either norm is under eps."""
    a, back = _in(tensor)
    m, _ = _in(mask)
    return back(_rescaled(a, np.asarray(m), norm, eps))


def _rng(rng):
    if rng is None:
        return np.random
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(rng)


def magnitude(tensor, density, rescale_norm=None):
    """Keep the density share of the largest magnitudes (at least one in a
    non-empty tensor), zero the rest."""
    a, back = _in(tensor)
    if density >= 1:
        return tensor
    if density <= 0 or a.size == 0:
        return back(np.zeros_like(a))
    k = max(1, int(density * a.size))
    w = np.abs(a.reshape(-1).astype(np.float32 if a.dtype == np.float16 else a.dtype))
    keep = np.argsort(-w, kind="stable")[:k]
    mask = np.zeros(a.size, dtype=a.dtype)
    mask[keep] = 1
    return back(_rescaled(a, mask.reshape(a.shape), rescale_norm, 1e-7))


def magnitude_outliers(tensor, density, rescale_norm=None, gamma=0.01):
    """Drop the gamma share of the largest magnitudes, then the smallest,
    keeping the density share."""
    a, back = _in(tensor)
    if density >= 1:
        return tensor
    n = a.size
    target = int(density * n)
    ntop = int(gamma * n)
    nbot = max(0, n - target - ntop)
    w = np.abs(a.reshape(-1).astype(np.float32 if a.dtype == np.float16 else a.dtype))
    order = np.argsort(w, kind="stable")
    mask = np.zeros(n, dtype=a.dtype)
    mask[order[nbot:nbot + target]] = 1
    return back(_rescaled(a, mask.reshape(a.shape), rescale_norm, 1e-7))


def bernoulli(tensor, density, rescale_norm=None, rng=None):
    """Keep each element with probability density."""
    a, back = _in(tensor)
    if density >= 1:
        return tensor
    w = a.astype(_work(a))
    mask = (_rng(rng).random(w.shape) < density).astype(w.dtype)
    return back(_rescaled(w, mask, rescale_norm, 1e-7).astype(a.dtype))


def della_magprune(tensor, density, epsilon, rescale_norm=None, rng=None):
    """Keep each element with a probability from density - epsilon (the
    smallest magnitude of its row) to density + epsilon (the largest),
    by rank."""
    a, back = _in(tensor)
    if density >= 1:
        return tensor
    if density <= 0:
        return back(np.zeros_like(a))
    if density + epsilon >= 1 or density - epsilon <= 0:
        raise ValueError("Epsilon must be chosen such that density +/- epsilon is in (0, 1)")
    shape = a.shape
    w = a.astype(_work(a))
    if w.ndim < 2:
        w = w.reshape(1, -1)
    order = np.argsort(np.abs(w), axis=1, kind="stable")
    ranks = (np.argsort(order, axis=1, kind="stable") + 1).astype(w.dtype)
    lo, hi = ranks.min(axis=1, keepdims=True), ranks.max(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        rank_norm = np.clip((ranks - lo) / (hi - lo), 0, 1)
    probs = (density - epsilon) + rank_norm * 2 * epsilon
    mask = (_rng(rng).random(w.shape) < probs).astype(w.dtype)
    return back(_rescaled(w, mask, rescale_norm, 1e-7).astype(a.dtype).reshape(shape))


def sparsify(tensor, density, method, gamma=0, epsilon=0, rescale_norm=None, rng=None):
    """mergekit's sparsify: the method (a SparsificationMethod or its
    name) applied to the tensor."""
    method = SparsificationMethod(method)
    if method == SparsificationMethod.magnitude:
        return magnitude(tensor, density=density, rescale_norm=rescale_norm)
    if method == SparsificationMethod.random:
        return bernoulli(tensor, density=density, rescale_norm=rescale_norm, rng=rng)
    if method == SparsificationMethod.magnitude_outliers:
        return magnitude_outliers(tensor, density=density, rescale_norm=rescale_norm, gamma=gamma)
    return della_magprune(tensor, density=density, epsilon=epsilon, rescale_norm=rescale_norm, rng=rng)
