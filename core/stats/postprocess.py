"""What-if post-processing of a layer sample before metrics and projections.

Each transform is pure: ``(K, d) -> (K, d')``, float64, the input untouched. ``PostProcess``
composes them in one fixed, documented order and is a frozen dataclass, so it can be part of
a cache key (``to_dict``). Numpy only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable

import numpy as np

__all__ = ["center", "zscore", "all_but_the_top", "whiten", "remove_dims", "PostProcess"]


def _sample(X: Any) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"X must be a non-empty 2-D (n_tokens, d_model) array, got shape {X.shape}")
    return X


def _top_components(Xc: np.ndarray, D: int) -> np.ndarray:
    """(d, D) principal directions of centred Xc, by decreasing variance."""
    _, V = np.linalg.eigh(Xc.T @ Xc)  # ascending eigenvalues
    return V[:, ::-1][:, :D]


def center(X: np.ndarray) -> np.ndarray:
    """Subtract the mean vector (the common direction behind most anisotropy).

    Parameters
    ----------
    X : ndarray of shape (K, d)

    Returns
    -------
    ndarray of shape (K, d)
        Columns with zero mean.
    """
    X = _sample(X)
    return X - X.mean(axis=0)


def zscore(X: np.ndarray) -> np.ndarray:
    """Standardise each dimension to zero mean and unit standard deviation (ddof=0).

    Removes the scale of outlier dimensions (Timkey & van Schijndel 2021 use this to neutralise
    rogue dimensions). Dimensions with zero standard deviation are left at 0.

    Parameters
    ----------
    X : ndarray of shape (K, d)

    Returns
    -------
    ndarray of shape (K, d)
    """
    Xc = center(X)
    std = Xc.std(axis=0)
    safe = np.where(std > 0, std, 1.0)
    return np.where(std > 0, Xc / safe, 0.0)


def all_but_the_top(X: np.ndarray, D: int) -> np.ndarray:
    """All-but-the-top (Mu & Viswanath 2018): remove the mean and the top D principal directions.

    ``x~ = (x - mu) - sum_{i<=D} (u_i . (x - mu)) u_i``, ``u_i`` the principal components.

    Parameters
    ----------
    X : ndarray of shape (K, d)
    D : int
        Number of dominating directions to remove, ``0 <= D < d`` (the paper uses ~d/100).

    Returns
    -------
    ndarray of shape (K, d)
    """
    X = _sample(X)
    if isinstance(D, bool) or int(D) != D or not 0 <= D < X.shape[1]:
        raise ValueError(f"D must be an integer in [0, d) = [0, {X.shape[1]}), got {D!r} for X of shape {X.shape}")
    Xc = X - X.mean(axis=0)
    if D == 0:
        return Xc
    U = _top_components(Xc, int(D))
    return Xc - (Xc @ U) @ U.T


def whiten(X: np.ndarray, k: int | None = None, eps: float = 1e-8) -> np.ndarray:
    """Whitening (Su, Cao, Liu & Ou 2021, "Whitening Sentence Representations").

    ``x~ = (x - mu) W`` with ``W = U Lambda^{-1/2}``, ``Sigma = U Lambda U^T`` the covariance
    (ddof=1) of X, so the output covariance is the identity (up to ``eps``, added to the
    eigenvalues against division by zero). With ``k``, only the top-k components are kept
    (dimension reduction, as in the paper).

    Parameters
    ----------
    X : ndarray of shape (K, d)
        Needs K >= 2; for a full-rank result K > d.
    k : int, optional
        Number of components kept, ``1 <= k <= d``. None keeps all d.
    eps : float
        Added to the eigenvalues.

    Returns
    -------
    ndarray of shape (K, k) (or (K, d) when k is None)
    """
    X = _sample(X)
    K, d = X.shape
    if K < 2:
        raise ValueError(f"whiten needs at least 2 rows, got X of shape {X.shape}")
    if k is None:
        k = d
    if isinstance(k, bool) or int(k) != k or not 1 <= k <= d:
        raise ValueError(f"k must be an integer in [1, d] = [1, {d}], got {k!r} for X of shape {X.shape}")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")
    Xc = X - X.mean(axis=0)
    lam, U = np.linalg.eigh((Xc.T @ Xc) / (K - 1))
    lam, U = np.clip(lam[::-1][: int(k)], 0.0, None), U[:, ::-1][:, : int(k)]
    return Xc @ (U / np.sqrt(lam + eps))


def remove_dims(X: np.ndarray, dims: Iterable[int]) -> np.ndarray:
    """Drop the given dimensions (e.g. outlier dimensions, Puccetti et al. 2022).

    Parameters
    ----------
    X : ndarray of shape (K, d)
    dims : iterable of int
        Distinct column indices in [0, d); at least one column must remain.

    Returns
    -------
    ndarray of shape (K, d - len(dims))
    """
    X = _sample(X)
    d = X.shape[1]
    dims = _check_dims(dims)
    bad = [i for i in dims if i >= d]
    if bad:
        raise ValueError(f"dims {bad} out of range for X of shape {X.shape}")
    if len(dims) >= d:
        raise ValueError(f"removing {len(dims)} dims from X of shape {X.shape} leaves no column")
    keep = np.setdiff1d(np.arange(d), np.asarray(dims, dtype=np.int64))
    return X[:, keep]


def _check_dims(dims: Iterable[int]) -> tuple[int, ...]:
    out = []
    for i in dims:
        if isinstance(i, (bool, np.bool_)) or int(i) != i or i < 0:
            raise ValueError(f"dims must be non-negative integers, got {i!r}")
        out.append(int(i))
    if len(set(out)) != len(out):
        raise ValueError(f"dims must be distinct, got {out}")
    return tuple(sorted(out))


@dataclass(frozen=True)
class PostProcess:
    """A composition of post-processing steps, applied in a fixed order.

    Order of :meth:`apply`: (1) ``remove`` dimensions (indices refer to the raw model
    dimensions), (2) ``center``, (3) ``zscore``, (4) all-but-the-top with ``abtt`` directions,
    (5) ``whiten`` (optionally to ``whiten_k`` components). ``remove`` is normalised to a sorted
    tuple so equal configurations compare and hash equal.
    """

    center: bool = False
    zscore: bool = False
    abtt: int = 0
    whiten: bool = False
    whiten_k: int | None = None
    remove: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("center", "zscore", "whiten"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
            object.__setattr__(self, name, bool(getattr(self, name)))
        if isinstance(self.abtt, bool) or int(self.abtt) != self.abtt or self.abtt < 0:
            raise ValueError(f"abtt must be a non-negative integer, got {self.abtt!r}")
        object.__setattr__(self, "abtt", int(self.abtt))
        if self.whiten_k is not None:
            if not self.whiten:
                raise ValueError("whiten_k is set but whiten is False")
            if isinstance(self.whiten_k, bool) or int(self.whiten_k) != self.whiten_k or self.whiten_k < 1:
                raise ValueError(f"whiten_k must be a positive integer or None, got {self.whiten_k!r}")
            object.__setattr__(self, "whiten_k", int(self.whiten_k))
        object.__setattr__(self, "remove", _check_dims(self.remove))

    @property
    def is_identity(self) -> bool:
        """True when :meth:`apply` returns X unchanged."""
        return self == PostProcess()

    def apply(self, X: np.ndarray) -> np.ndarray:
        """Apply the steps to ``X`` of shape (K, d); returns a new float64 array."""
        X = _sample(X)
        d = X.shape[1]
        if self.remove:
            X = remove_dims(X, self.remove)
        d_left = X.shape[1]
        if self.abtt >= d_left:
            raise ValueError(f"abtt={self.abtt} must be < the {d_left} dimensions left (X of shape (K, {d}))")
        if self.whiten_k is not None and self.whiten_k > d_left:
            raise ValueError(f"whiten_k={self.whiten_k} exceeds the {d_left} dimensions left (X of shape (K, {d}))")
        if self.center:
            X = center(X)
        if self.zscore:
            X = zscore(X)
        if self.abtt:
            X = all_but_the_top(X, self.abtt)
        if self.whiten:
            X = whiten(X, self.whiten_k)
        return X

    def label(self) -> str:
        """Short human-readable description, "raw" for the identity."""
        parts = []
        if self.remove:
            parts.append("drop dims " + ",".join(str(i) for i in self.remove))
        if self.center:
            parts.append("center")
        if self.zscore:
            parts.append("z-score")
        if self.abtt:
            parts.append(f"ABTT-{self.abtt}")
        if self.whiten:
            parts.append("whiten" if self.whiten_k is None else f"whiten-{self.whiten_k}")
        return " + ".join(parts) if parts else "raw"

    def to_dict(self) -> dict:
        """JSON-ready dict (``remove`` as a list)."""
        out = asdict(self)
        out["remove"] = list(self.remove)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "PostProcess":
        """Inverse of :meth:`to_dict`; missing keys take defaults, unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown PostProcess keys {sorted(unknown)}; expected a subset of {sorted(known)}")
        kwargs = dict(data)
        if "remove" in kwargs:
            kwargs["remove"] = tuple(kwargs["remove"])
        return cls(**kwargs)
