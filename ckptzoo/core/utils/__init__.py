from .misc import unmap

__all__ = ['unmap']

from .dist_utils import reduce_mean  # noqa: E402

__all__ += ['reduce_mean']

from .misc import flip_tensor  # noqa: E402

__all__ += ['flip_tensor']

from .gaussian_mixture import GaussianMixture1D  # noqa: E402

__all__ += ['GaussianMixture1D']
from .misc import center_of_mass, generate_coordinate  # noqa: E402

__all__ += ['center_of_mass', 'generate_coordinate']

from .misc import multi_apply  # noqa: E402

__all__ += ['multi_apply']
