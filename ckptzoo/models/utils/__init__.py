from .norm import NORM_LAYERS, build_norm_layer

__all__ = ['NORM_LAYERS', 'build_norm_layer']
