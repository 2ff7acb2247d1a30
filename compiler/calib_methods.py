"""How a tensor's symmetric int8 range (its clip threshold T, scale T / 127) is chosen from
what calibration saw: the histogram of ``|x|`` over ``[0, max|x|]``.

- ``minmax``: T = max|x| (nothing clips; one outlier coarsens every other value).
- ``percentile[:P]``: the upper edge of the bin where the cumulative count reaches P percent
  (default 99.99), as pytorch-quantization's histogram calibrator does.
- ``entropy``: TensorRT's KL calibration - for each candidate number of kept bins i (from
  ``quant_bins`` up), P = the first i bins with the clipped outliers added to the last, Q = those
  i bins merged into ``quant_bins`` levels and spread back over their non-empty bins; T is the
  upper edge of the i with the smallest KL(P || Q) (a Q empty where P is not: infinite; a P
  of one non-empty bin, trivially KL 0, is no candidate). No damping of the zero bin
  (pytorch-quantization sets it to its neighbour's count, which lets a sparse histogram - the
  17 pixel levels of the digits - clip everything to its first level).
- ``mse``: the bin edge T minimizing the squared error of quantizing each bin's centre to
  ``round(c / s)`` clipped to +-``levels``, times ``s = T / levels``, weighted by the counts.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "DEFAULT_PERCENTILE",
    "METHODS",
    "CalibMethodError",
    "entropy_threshold",
    "mse_threshold",
    "parse_method",
    "percentile_threshold",
]

METHODS = ("minmax", "percentile", "entropy", "mse")
DEFAULT_PERCENTILE = 99.99
#: Histogram bins over [0, max|x|] (as TensorRT and pytorch-quantization use).
BINS = 2048
#: Levels of a symmetric int8 code on each side of 0.
LEVELS = 127


class CalibMethodError(ValueError):
    """A calibration method that does not exist or has a bad parameter."""


def parse_method(text: str) -> tuple[str, float | None]:
    """``"minmax"``, ``"percentile"``, ``"percentile:99.9"``, ``"entropy"`` or ``"mse"`` ->
    (method, percentile or None)."""
    name, _, arg = text.partition(":")
    if name not in METHODS:
        raise CalibMethodError(
            f"unknown calibration method {text!r}; use one of {', '.join(METHODS)} "
            f"(percentile:P for a percentile other than {DEFAULT_PERCENTILE})"
        )
    if not arg:
        return name, DEFAULT_PERCENTILE if name == "percentile" else None
    try:
        value = float(arg) if name == "percentile" else None
    except ValueError:
        value = None
    if value is None or not 0.0 < value <= 100.0:
        raise CalibMethodError(
            f"calibration method {text!r}: only percentile takes a parameter, a number in "
            "(0, 100] (e.g. percentile:99.9)"
        )
    return name, value


def percentile_threshold(hist: np.ndarray, amax: float, percentile: float) -> float:
    """T for ``hist`` (counts of |x| in equal bins over [0, amax]): see the module docstring."""
    hist = np.asarray(hist, np.float64)
    cdf = np.cumsum(hist) / hist.sum()
    index = min(int(np.searchsorted(cdf, percentile / 100.0)), len(hist) - 1)
    return amax * (index + 1) / len(hist)


def entropy_threshold(hist: np.ndarray, amax: float, quant_bins: int = LEVELS + 1) -> float:
    """T by minimal KL divergence (TensorRT); see the module docstring."""
    hist = np.array(hist, np.float64)
    nbins = len(hist)
    if nbins <= quant_bins:
        return amax
    best, best_kl = nbins, np.inf
    for i in range(quant_bins, nbins + 1):
        p = hist[:i].copy()
        p[-1] += hist[i:].sum()
        kept = hist[:i]
        starts = (np.arange(quant_bins) * i) // quant_bins  # each level merges >= 1 bin
        sums = np.add.reduceat(kept, starts)
        used = np.add.reduceat((kept > 0).astype(np.float64), starts)
        per_bin = np.divide(sums, used, out=np.zeros_like(sums), where=used > 0)
        q = np.where(kept > 0, np.repeat(per_bin, np.diff(np.append(starts, i))), 0.0)
        if p.sum() == 0 or q.sum() == 0:
            continue
        p, q = p / p.sum(), q / q.sum()
        mask = p > 0
        if mask.sum() < 2 or np.any(q[mask] == 0):
            continue  # infinite divergence
        kl = float(np.sum(p[mask] * np.log(p[mask] / q[mask])))
        if kl < best_kl:
            best, best_kl = i, kl
    return amax * best / nbins


def mse_threshold(hist: np.ndarray, amax: float, levels: int = LEVELS) -> float:
    """T by minimal quantization MSE over the histogram; see the module docstring."""
    hist = np.asarray(hist, np.float64)
    nbins = len(hist)
    width = amax / nbins
    centres = (np.arange(nbins) + 0.5) * width
    candidates = np.arange(1, nbins + 1) * width
    errors = []
    for t in candidates:
        s = t / levels
        q = np.clip(np.rint(centres / s), -levels, levels) * s
        errors.append(float(np.sum(hist * (centres - q) ** 2)))
    return float(candidates[int(np.argmin(errors))])
