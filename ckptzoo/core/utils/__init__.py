from .misc import unmap

__all__ = ['unmap']
