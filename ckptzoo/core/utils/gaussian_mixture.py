"""A two-component Gaussian mixture on one-dimensional data, fitted by EM as
``sklearn.mixture.GaussianMixture(2, weights_init, means_init, precisions_init,
covariance_type='diag')`` fits it (scikit-learn 1.9.1's steps and floating-point order), so
that PAA's assignment needs no scikit-learn. Only what PAA uses: the fit from given initial
parameters, then ``predict`` and ``score_samples`` on the same data."""
import math

import numpy as np

__all__ = ['GaussianMixture1D']


def _logsumexp(a):
    """sklearn's ``_logsumexp`` over axis 1 (scipy's algorithm: the maxima are taken out and
    counted, ``log1p`` of the rest)."""
    a_max = np.max(a, axis=1, keepdims=True)
    index_max = a == a_max
    a = np.array(a, copy=True)
    a[index_max] = -np.inf
    m = np.sum(index_max.astype(a.dtype), axis=1, keepdims=True, dtype=a.dtype)
    shift = np.where(np.isfinite(a_max), a_max, 0)
    s = np.sum(np.exp(a - shift), axis=1, keepdims=True)
    s = np.where(s == 0, s, s / m)
    return np.squeeze(np.log1p(s) + np.log(m) + a_max, axis=1)


class GaussianMixture1D:
    """``fit(X)`` with ``X`` ``[n, 1]`` (n >= 2), then ``predict(X)`` (the component of each
    sample) and ``score_samples(X)`` (each sample's log-likelihood), as scikit-learn's
    ``GaussianMixture`` with ``covariance_type='diag'`` (one feature), ``tol=1e-3``,
    ``reg_covar=1e-6``, ``max_iter=100``, ``n_init=1``. The data keep their dtype (float32
    losses stay float32 where sklearn keeps them so)."""

    def __init__(self, weights_init, means_init, precisions_init, tol=1e-3, reg_covar=1e-6,
                 max_iter=100):
        self.weights_ = np.asarray(weights_init)
        self.means_ = np.asarray(means_init)
        self.precisions_cholesky_ = np.sqrt(np.asarray(precisions_init))
        self.tol, self.reg_covar, self.max_iter = tol, reg_covar, max_iter
        self.converged_ = False

    def _weighted_log_prob(self, X):
        prec_chol = self.precisions_cholesky_
        log_det = np.sum(np.log(prec_chol), axis=1)
        precisions = prec_chol**2
        log_prob = (np.sum(self.means_**2 * precisions, axis=1)
                    - 2.0 * (X @ (self.means_ * precisions).T) + (X**2 @ precisions.T))
        return -0.5 * (X.shape[1] * math.log(2 * math.pi) + log_prob) + log_det + \
            np.log(self.weights_)

    def fit(self, X):
        if X.ndim != 2 or X.shape[1] != 1 or X.shape[0] < 2:
            raise ValueError(f'GaussianMixture1D fits [n >= 2, 1] data, got {X.shape}')
        if not np.isfinite(X).all():
            raise ValueError('GaussianMixture1D: the data are not all finite')
        lower_bound = -np.inf
        for _ in range(self.max_iter):
            prev_lower_bound = lower_bound
            weighted = self._weighted_log_prob(X)
            log_prob_norm = _logsumexp(weighted)
            with np.errstate(under='ignore'):
                log_resp = weighted - log_prob_norm[:, np.newaxis]
            self._m_step(X, np.exp(log_resp))
            lower_bound = np.mean(log_prob_norm)
            if abs(lower_bound - prev_lower_bound) < self.tol:
                self.converged_ = True
                break
        return self

    def _m_step(self, X, resp):
        nk = np.sum(resp, axis=0) + 10 * np.finfo(resp.dtype).eps
        means = (resp.T @ X) / nk[:, np.newaxis]
        covariances = (resp.T @ (X * X)) / nk[:, np.newaxis] - means**2 + self.reg_covar
        if np.any(covariances <= 0.0):
            raise ValueError('GaussianMixture1D: a component collapsed (variance <= 0)')
        self.weights_ = nk / np.sum(nk)
        self.means_ = means
        self.precisions_cholesky_ = 1.0 / np.sqrt(covariances)

    def predict(self, X):
        return np.argmax(self._weighted_log_prob(X), axis=1)

    def score_samples(self, X):
        return _logsumexp(self._weighted_log_prob(X))
