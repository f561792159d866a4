"""multi_apply (mmdet's): per-item results transposed into one list per result."""
from ckptzoo.core.utils import multi_apply


def test_results_are_transposed_and_kwargs_passed():
    def f(a, b, scale=1):
        return a * scale, b + a
    assert multi_apply(f, [1, 2, 3], [10, 20, 30], scale=2) == ([2, 4, 6], [11, 22, 33])
    assert multi_apply(f, [], []) == ()
