"""A numpy namespace with the names numpy 2 removed that the evaluation packages of the
registry still call (lvis 0.5.3: ``np.float``; cityscapesscripts 2.3.0: ``np.in1d``, and
``np.count_nonzero`` returning a Python int, which it writes to json), given to
their modules only (``module.np = numpy_with_aliases()``): numpy itself is left as it is."""
import types

import numpy as np

__all__ = ['numpy_with_aliases', 'patch_module']


class _NumpyWithAliases(types.ModuleType):
    float = float
    int = int
    bool = bool

    @staticmethod
    def in1d(ar1, ar2, assume_unique=False, invert=False):
        return np.isin(np.asarray(ar1).ravel(), ar2, assume_unique=assume_unique,
                       invert=invert)

    @staticmethod
    def count_nonzero(a, axis=None, *, keepdims=False):
        # numpy 1 gave a Python int without an axis; cityscapesscripts writes it to json
        out = np.count_nonzero(a, axis=axis, keepdims=keepdims)
        return int(out) if axis is None and not keepdims else out

    def __getattr__(self, name):
        return getattr(np, name)


_NUMPY = _NumpyWithAliases('numpy')


def numpy_with_aliases():
    return _NUMPY


def patch_module(module):
    """Give ``module`` (one that did ``import numpy as np``) the aliased namespace."""
    if getattr(module, 'np', None) is not _NUMPY:
        module.np = _NUMPY
    return module
