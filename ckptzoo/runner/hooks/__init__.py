from .hook import Hook

__all__ = ['Hook']
