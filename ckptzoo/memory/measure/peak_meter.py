"""The peak memory of a stretch of work (a training step), read one way wherever it is read.

On CUDA the allocator's statistics: ``reset_peak_memory_stats`` at the start,
``max_memory_allocated`` (and ``max_memory_reserved``) at the end, of one device (None: the
current one). On CPU, where there is no allocator statistic, the exact peak of live tensor
storage (:class:`~ckptzoo.memory.measure.trackers.LiveTensorTracker`), counting the storages of the
objects given (model, optimizer, batch: what the work holds from its start) from the start.
The meter does not synchronise: the callers that time the work synchronise around it.
"""
from __future__ import annotations

from typing import Any

import torch

from .trackers import LiveTensorTracker

__all__ = ['PeakMeter']


class PeakMeter:
    """One reading of peak memory, from :meth:`start` to :meth:`stop` (or over a ``with``
    block)::

        with PeakMeter(model, optimizer, batch, cuda=on_cuda) as meter:
            step()
        meter.peak_bytes, meter.reserved_bytes

    Args:
        *tracked: on CPU, what the tracker counts from the start (tensors, modules,
            optimizers, nested containers of them: :meth:`LiveTensorTracker.track`); not
            used on CUDA.
        cuda (bool): read the CUDA allocator (else track live tensors).
        device: the CUDA device whose statistics are read (None: the current device).

    ``peak_bytes``: the peak (None until stopped); ``reserved_bytes``: the allocator's
    reserved peak on CUDA, None on CPU; ``tracker``: the CPU tracker while it runs (its
    ``live_bytes`` and ``baseline_bytes`` can be read during the work), else None.
    """

    def __init__(self, *tracked: Any, cuda: bool = False, device: Any = None):
        self.tracked = tracked
        self.cuda = bool(cuda)
        self.device = device
        self.tracker: LiveTensorTracker | None = None
        self.peak_bytes: int | None = None
        self.reserved_bytes: int | None = None

    def start(self) -> PeakMeter:
        """Start measuring from now."""
        self.peak_bytes = self.reserved_bytes = None
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            tracker = LiveTensorTracker()
            tracker.__enter__()
            try:
                tracker.track(*self.tracked)
            except BaseException:
                tracker.__exit__(None, None, None)
                raise
            self.tracker = tracker
        return self

    def stop(self) -> int:
        """Stop and read the peak (bytes); a meter not running is left as it is."""
        if self.cuda:
            self.peak_bytes = torch.cuda.max_memory_allocated(self.device)
            self.reserved_bytes = torch.cuda.max_memory_reserved(self.device)
        elif self.tracker is not None:
            tracker, self.tracker = self.tracker, None
            self.peak_bytes = tracker.peak_bytes
            tracker.__exit__(None, None, None)
        return self.peak_bytes

    def close(self) -> None:
        """End a CPU tracker without reading it (work that raised)."""
        if self.tracker is not None:
            tracker, self.tracker = self.tracker, None
            tracker.__exit__(None, None, None)

    def __enter__(self) -> PeakMeter:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
