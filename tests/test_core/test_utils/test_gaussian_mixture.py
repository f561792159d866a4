import numpy as np
import pytest

from ckptzoo.core.utils import GaussianMixture1D

X = np.array([0.11, 0.13, 0.2, 0.35, 0.4, 1.9, 2.2, 2.5, 3.1], dtype=np.float32).reshape(-1, 1)


def _gmm(x=X):
    return GaussianMixture1D(weights_init=np.array([0.5, 0.5]),
                             means_init=np.array([x.min(), x.max()]).reshape(2, 1),
                             precisions_init=np.array([1.0, 1.0]).reshape(2, 1))


def test_equals_sklearn_on_paas_settings():
    """The numbers scikit-learn 1.9.1's ``GaussianMixture(2, covariance_type='diag')`` gives
    from the same initialisation (PAA's), bit for bit."""
    gmm = _gmm().fit(X)
    assert gmm.converged_
    assert gmm.predict(X).tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert gmm.score_samples(X).tolist() == [
        0.04018878212702256, 0.21299344441578627, 0.5871585277278099, 0.18077070781667431,
        -0.3207970688821627, -1.6172104908749234, -1.0458745191605794, -0.9316227729423016,
        -2.074370579665001]
    assert gmm.means_.ravel().tolist() == [0.23799935883575038, 2.4249875272354005]
    assert gmm.weights_.tolist() == [0.5555528616950295, 0.4444471383049705]


def test_bad_data_are_named():
    with pytest.raises(ValueError, match=r'\[n >= 2, 1\]'):
        _gmm().fit(X[:1])
    with pytest.raises(ValueError, match='finite'):
        _gmm().fit(np.array([[0.], [np.nan]]))
    # identical samples: a component collapses to the regularisation, still fits
    same = np.ones((4, 1))
    assert _gmm(same).fit(same).predict(same).tolist() == [0, 0, 0, 0]
