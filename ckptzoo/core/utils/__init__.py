from .misc import unmap

__all__ = ['unmap']

from .dist_utils import reduce_mean  # noqa: E402

__all__ += ['reduce_mean']
