"""Deterministic memory counts (bytes, not timings) for tests and benchmarks."""
import torch

__all__ = ['SavedTensorCounter', 'saved_tensor_bytes']


class SavedTensorCounter(torch.autograd.graph.saved_tensors_hooks):
    """Counts the bytes autograd keeps for backward, once per storage.

    Tensors saved inside a non-reentrant checkpoint are held by the checkpoint's own hooks and
    freed, so they are not seen here: exactly the memory checkpointing saves. Parameters saved
    by convs are counted too (as the reference figures of mmdet / timm were measured);
    ``include_params=False`` leaves them out.
    """

    def __init__(self, include_params=True):
        self.storages = {}
        self.include_params = include_params
        super().__init__(self._pack, lambda t: t)

    def _pack(self, t):
        if self.include_params or not isinstance(t, torch.nn.Parameter):
            s = t.untyped_storage()
            self.storages[(t.device, s.data_ptr())] = s.nbytes()
        return t

    @property
    def bytes(self):
        return sum(self.storages.values())


def saved_tensor_bytes(fn, *args, include_params=True, **kwargs):
    """``(bytes saved for backward by fn(*args, **kwargs), its output)``."""
    counter = SavedTensorCounter(include_params)
    with counter:
        out = fn(*args, **kwargs)
    return counter.bytes, out
