"""Deterministic memory counts (bytes, not timings) for tests and benchmarks."""
from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any, Callable, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ...utils.nested import iter_tensors

__all__ = ['SavedTensorCounter', 'saved_tensor_bytes', 'LiveTensorTracker', 'peak_live_bytes']


class SavedTensorCounter(torch.autograd.graph.saved_tensors_hooks):
    """Counts the bytes autograd keeps for backward, once per storage.

    Tensors saved inside a non-reentrant checkpoint are held by the checkpoint's own hooks and
    freed, so they are not seen here: exactly the memory checkpointing saves. Parameters saved
    by convs are counted too (as the reference figures of mmdet / timm were measured);
    ``include_params=False`` leaves them out.
    """

    def __init__(self, include_params: bool = True):
        self.storages = {}
        self.include_params = include_params
        super().__init__(self._pack, lambda t: t)

    def _pack(self, t):
        if self.include_params or not isinstance(t, torch.nn.Parameter):
            s = t.untyped_storage()
            self.storages[(t.device, s.data_ptr())] = s.nbytes()
        return t

    @property
    def bytes(self) -> int:
        """Bytes of the distinct storages saved so far."""
        return sum(self.storages.values())


def saved_tensor_bytes(fn: Callable[..., Any], *args: Any, include_params: bool = True,
                       **kwargs: Any) -> tuple[int, Any]:
    """``(bytes saved for backward by fn(*args, **kwargs), its output)``."""
    counter = SavedTensorCounter(include_params)
    with counter:
        out = fn(*args, **kwargs)
    return counter.bytes, out


class LiveTensorTracker(TorchDispatchMode):
    """The exact peak of the bytes held by live tensor storages while it is active, on any device.

    Why: on a CPU there is no ``torch.cuda.max_memory_allocated``; this is its equivalent at the
    level of tensors. Every storage that an op (forward, backward, checkpoint recompute,
    optimizer step) returns or reads is counted once, with its ``nbytes``, from the moment it is
    first seen until it is freed: a ``weakref.finalize`` on the ``UntypedStorage`` object fires
    when the storage itself is deallocated (torch keeps one Python object per storage alive as
    long as any tensor or autograd node uses it), and subtracts it. A storage that an op resizes
    is re-measured. Storages that exist before tracking starts (parameters, buffers, gradients,
    optimizer state, the input batch) are counted from :meth:`track`; pass them there so that
    the peak is the whole footprint of a step.

    Not counted: scratch memory a kernel allocates and frees inside one op (workspaces), memory
    of tensors made without an op (``torch.from_numpy``) that no op ever touches, allocator
    overhead (caching, alignment).

    Usage::

        with LiveTensorTracker() as tracker:
            tracker.track(model, optimizer, batch)
            train_step(...)
        tracker.peak_bytes, tracker.baseline_bytes

    Finalisers are detached when the ``with`` block ends; a tracker is for one block.
    """

    def __init__(self):
        super().__init__()
        self._sizes = {}
        self._tags = {}
        self.tag = None  # storages first seen while it is set are attributed to it
        self._finalizers = {}
        self._lock = threading.RLock()  # a finaliser may fire (GC) inside _add
        self.live_bytes = 0
        self.peak_bytes = 0
        self.baseline_bytes = 0
        #: a :class:`~ckptzoo.memory.measure.timeline.Timeline` noting the bytes after every op, and
        #: the largest live bytes since its last point
        self.timeline = None
        self.window_peak = 0

    def track(self, *objs: Any) -> int:
        """Count the storages of pre-existing tensors: tensors, modules (parameters, buffers and
        their gradients), optimizers (state) and nested dicts / lists / tuples of them.
        Returns the bytes now live."""
        for tensor in _tensors_in(objs):
            self._add(tensor)
        self.baseline_bytes = self.live_bytes
        return self.live_bytes

    def reset_peak(self) -> None:
        """Start a new peak from the bytes live now."""
        self.peak_bytes = self.live_bytes

    def live_bytes_by_tag(self) -> dict[Any, int]:
        """``{tag: live bytes}`` of the storages alive now, by the ``tracker.tag`` in force
        when each was first seen (how the memory planner attributes memory to units)."""
        with self._lock:
            out = {}
            for key, nbytes in self._sizes.items():
                tag = self._tags.get(key)
                out[tag] = out.get(tag, 0) + nbytes
            return out

    def live_bytes_of(self, keys: Iterable[int], tag: Any = None) -> int:
        """Live bytes of the storages ``keys`` (``untyped_storage()._cdata``) first seen under
        ``tag``."""
        with self._lock:
            return sum(self._sizes[k] for k in keys
                       if k in self._sizes and self._tags.get(k) == tag)

    def _add(self, tensor):
        if tensor.device.type == 'meta' or tensor.is_sparse:
            return
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # no storage (e.g. some subclasses)
            return
        key = storage._cdata
        nbytes = storage.nbytes()
        with self._lock:
            old = self._sizes.get(key)
            if old is None:
                self._sizes[key] = nbytes
                self._tags[key] = self.tag
                self._finalizers[key] = weakref.finalize(storage, self._free, key)
                self.live_bytes += nbytes
            elif old != nbytes:
                self._sizes[key] = nbytes
                self.live_bytes += nbytes - old
            if self.live_bytes > self.peak_bytes:
                self.peak_bytes = self.live_bytes
            if self.live_bytes > self.window_peak:
                self.window_peak = self.live_bytes

    def _free(self, key):
        with self._lock:
            nbytes = self._sizes.pop(key, None)
            self._tags.pop(key, None)
            self._finalizers.pop(key, None)
            if nbytes is not None:
                self.live_bytes -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        for tensor in _tensors_in((args, kwargs, out)):
            self._add(tensor)
        if self.timeline is not None:
            self.timeline.op(self)
        return out

    def __exit__(self, *exc):
        result = super().__exit__(*exc)
        with self._lock:
            for fin in self._finalizers.values():
                fin.detach()
            self._finalizers.clear()
            self._sizes.clear()
            self._tags.clear()
        return result


def _held(obj):
    """What a module or an optimizer holds in memory: parameters, buffers and gradients; the
    optimizer's state."""
    if isinstance(obj, torch.nn.Module):
        tensors = list(itertools.chain(obj.parameters(), obj.buffers()))
        return tensors + [t.grad for t in tensors if t.grad is not None]
    if isinstance(obj, torch.optim.Optimizer):
        return list(obj.state.values())
    return None


def _tensors_in(obj):
    """Tensors in (nested) tensors, modules, optimizers, dicts, lists and tuples."""
    return iter_tensors(obj, expand=_held)


def peak_live_bytes(fn: Callable[..., Any], *args: Any, existing: Any = (),
                    **kwargs: Any) -> tuple[int, Any]:
    """``(peak bytes of live tensor storages while running fn(*args, **kwargs), its output)``;
    ``existing`` (tensors, modules, optimizers, ...) and the arguments are counted from the
    start (see :class:`LiveTensorTracker`)."""
    with LiveTensorTracker() as tracker:
        tracker.track(existing, args, kwargs)
        out = fn(*args, **kwargs)
    return tracker.peak_bytes, out
