"""The least squares behind the overlap tax (``metrics.tax``): a duration's logarithm fitted
on fixed effects for the work (its key) and for the (rank, step) it ran in (its cluster),
plus the shares it spent beside collectives, with a cluster bootstrap for the interval. Pure
numpy; defined in ``docs/metrics.md``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Refits of the cluster bootstrap, and the seed of its draws (the same trace gives the same
#: interval).
BOOTSTRAP = 200
SEED = 0


@dataclass(frozen=True)
class Samples:
    """Occurrences ready to fit: log duration, identity, cluster, and shares (columns)."""

    log_duration: np.ndarray
    key: np.ndarray
    cluster: np.ndarray
    shares: np.ndarray       # (n, columns)

    def subset(self, keep: np.ndarray) -> Samples:
        return Samples(self.log_duration[keep], self.key[keep], self.cluster[keep],
                       self.shares[keep])


def row_ids(*columns: np.ndarray) -> np.ndarray:
    """One id per distinct row of the equally long integer ``columns``, numbered in the rows'
    lexicographic order: what ``np.unique(np.stack(columns, axis=1), axis=0,
    return_inverse=True)`` numbers them, by one ``lexsort`` (that sorts the rows as
    structured values: ten times slower on a large trace)."""
    count = columns[0].size
    if count == 0:
        return np.empty(0, dtype=np.int64)
    order = np.lexsort(columns[::-1])          # lexsort's last key is its first
    new = np.zeros(count, dtype=bool)
    new[0] = True
    for column in columns:
        ordered = column[order]
        new[1:] |= ordered[1:] != ordered[:-1]
    ids = np.empty(count, dtype=np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids


class Fit:
    """``log d = a(key) + b(cluster) + Σ γ_j f_j``, by weighted least squares with the key
    effects taken out by demeaning within keys. The cluster bootstrap refits with each
    cluster weighted by how often it was drawn (the same fit as on the drawn copies).

    Every refit weights whole clusters, so the fit is solved from sums kept per cluster and
    per (key, cluster) cell: with ``z`` a sample's regressors and target (its shares, its
    cluster's dummy, its log duration) and ``w_c`` the clusters' weights, the within-key
    cross products are ``M = Σ_c w_c A_c − Σ_k u_k u_kᵀ / W_k`` (``A_c = Σ z zᵀ`` over the
    cluster, ``u_k`` and ``W_k`` the key's weighted sums of ``z`` and of weight), and γ
    solves the normal equations ``M`` states. All refits are solved at once: the cost does
    not grow with the number of samples."""

    #: A column's within-key spread below this (mean square) is no spread at all, and one
    #: whose part unexplained by the other columns is below this share of it is collinear.
    _NO_SPREAD = 1e-18
    _COLLINEAR = 1e-12

    def __init__(self, samples: Samples) -> None:
        _, key = np.unique(samples.key, return_inverse=True)
        _, cluster = np.unique(samples.cluster, return_inverse=True)
        key, cluster = key.ravel(), cluster.ravel()
        self.size = int(key.size)
        self.keys = int(key.max()) + 1 if key.size else 0
        self.clusters = int(cluster.max()) + 1 if cluster.size else 0
        self.columns = int(samples.shares.shape[1])
        onehot = np.zeros((key.size, self.clusters))
        onehot[np.arange(key.size), cluster] = 1.0
        z = np.concatenate([samples.shares, onehot, samples.log_duration[:, None]], axis=1)
        # centred within keys first: the within-key products are then of small numbers, so
        # taking the key means out of them again below loses no precision (log durations
        # are large beside their spread); the fit, taken within keys, does not change
        counts = np.bincount(key, minlength=self.keys).astype(np.float64)
        means = np.stack([np.bincount(key, weights=column, minlength=self.keys)
                          for column in z.T], axis=1) / np.maximum(counts, 1.0)[:, None]
        z = z - means[key]
        width = z.shape[1]
        self.cross = np.zeros((self.clusters, width * width))     # A_c, flattened
        for c in range(self.clusters):
            mine = z[cluster == c]
            self.cross[c] = (mine.T @ mine).ravel()
        self.cell_sum = np.zeros((self.keys, self.clusters, width))  # U_kc
        np.add.at(self.cell_sum, (key, cluster), z)
        self.cell_count = np.zeros((self.keys, self.clusters))        # n_kc
        np.add.at(self.cell_count, (key, cluster), 1.0)

    def gammas(self, cluster_weight: np.ndarray, columns: Sequence[int]) -> np.ndarray:
        """γ of each of ``columns`` (``(columns, refits)``) for each row of cluster weights
        (``(refits, clusters)``); NaN where that column does not vary within any key or the
        loads explain it. The columns share one solve per refit."""
        refits = cluster_weight.shape[0]
        width = self.cell_sum.shape[2]
        if self.size < 2:
            return np.full((len(columns), refits), np.nan)
        moments = (cluster_weight @ self.cross).reshape(refits, width, width)
        # refits in chunks, so the (refit, key, column) sums stay a few MB
        chunk = max(1, 2_000_000 // max(self.keys * width, 1))
        for first in range(0, refits, chunk):
            w = cluster_weight[first:first + chunk]
            sums = (w @ self.cell_sum.transpose(1, 0, 2).reshape(self.clusters, -1)
                    ).reshape(w.shape[0], self.keys, width)
            weight = w @ self.cell_count.T
            scaled = sums / np.where(weight > 0, weight, 1.0)[:, :, None]
            moments[first:first + chunk] -= scaled.transpose(0, 2, 1) @ sums
        design = width - 1
        gram = moments[:, :design, :design].copy()
        target = moments[:, :design, design].copy()
        spreads = [gram[:, column, column].copy() for column in columns]
        total_weight = np.maximum(cluster_weight @ self.cell_count.sum(axis=0), 1.0)
        # The columns no refit can tell anything from are set aside (an identity in their
        # place): those with no spread within keys (a size class beside nothing, a cluster
        # not drawn), and one drawn cluster's dummy, since the dummies, demeaned within keys,
        # sum to zero.
        aside = np.diagonal(gram, axis1=1, axis2=2) <= self._NO_SPREAD * total_weight[:, None]
        aside[np.arange(refits), self.columns + np.argmax(cluster_weight > 0, axis=1)] = True
        gram[aside[:, :, None] | aside[:, None, :]] = 0.0
        gram[:, np.arange(design), np.arange(design)] += aside
        target[aside] = 0.0
        # any other collinearity (a share that one cluster's dummy explains, in a refit that
        # drew two clusters) is a direction of no extent: the pseudo-inverse leaves it out
        values, vectors = np.linalg.eigh(gram)      # the cost of a refit: done once for all
        kept = values > self._COLLINEAR * values[:, -1:]
        inverse_values = np.where(kept, 1.0 / np.where(kept, values, 1.0), 0.0)
        found = np.empty((len(columns), refits))
        for position, (column, spread) in enumerate(zip(columns, spreads, strict=True)):
            row = (vectors[:, column, :] * inverse_values)[:, None, :] @ vectors.transpose(
                0, 2, 1)
            row = row[:, 0, :]            # row ``column`` of the pseudo-inverse
            # γ is told only by what of its column the other columns (the loads) do not
            # explain: no direction left out may involve it, and that part, 1 / its diagonal
            # entry there (the Schur complement), must not vanish beside its spread
            involved = np.where(kept, 0.0, np.abs(vectors[:, column, :])).max(axis=1)
            told = ~aside[:, column] & (involved < 1e-6) & (
                row[:, column] * self._COLLINEAR * spread < 1.0)
            found[position] = np.where(told, (row * target).sum(axis=1), np.nan)
        return found

    def gamma(self, columns: Sequence[int]) -> list[float | None]:
        """γ of each of ``columns`` with every cluster once; None when it cannot be told."""
        found = self.gammas(np.ones((1, self.clusters)), columns)[:, 0]
        return [None if np.isnan(g) else float(g) for g in found]

    def interval(self, columns: Sequence[int]) -> list[tuple[float | None, float | None]]:
        """The 95% percentile interval of each column's tax over :data:`BOOTSTRAP` refits
        (None with one cluster, or when fewer than half of the refits can estimate it)."""
        if self.clusters < 2:
            return [(None, None)] * len(columns)
        rng = np.random.default_rng(SEED)
        draws = rng.multinomial(self.clusters, np.full(self.clusters, 1 / self.clusters),
                                size=BOOTSTRAP).astype(np.float64)
        found: list[tuple[float | None, float | None]] = []
        for gammas in self.gammas(draws, columns):
            taxes = 100.0 * np.expm1(gammas[~np.isnan(gammas)])
            if taxes.size < BOOTSTRAP / 2:
                found.append((None, None))
            else:
                low, high = np.percentile(taxes, [2.5, 97.5])
                found.append((float(low), float(high)))
        return found
