"""PeakMeter: one reading of a stretch of work's peak memory, the CPU tracker's or the CUDA
allocator's (of the device given, None: the current one)."""
import torch

from ckptzoo.memory.measure import peak_meter
from ckptzoo.memory.measure.peak_meter import PeakMeter
from ckptzoo.runner.utils import cuda_device


def test_on_cpu_the_tracker_counts_the_given_objects_from_the_start():
    a = torch.zeros(1000)                       # 4000 B, held from the start
    with PeakMeter(a) as meter:
        assert meter.tracker.baseline_bytes == 4000
        b = a + 1                               # 8000: the peak
        del b
        c = a[:10] * 2                          # 4040
    assert meter.peak_bytes == 8000 and meter.reserved_bytes is None
    assert meter.tracker is None                # stopped
    del c


def test_on_cuda_the_allocator_of_the_device_is_reset_then_read(monkeypatch):
    calls = []
    monkeypatch.setattr(peak_meter, 'LiveTensorTracker', None)  # not used on CUDA
    monkeypatch.setattr(torch.cuda, 'reset_peak_memory_stats',
                        lambda device=None: calls.append(('reset', device)))
    monkeypatch.setattr(torch.cuda, 'max_memory_allocated', lambda device=None: 7)
    monkeypatch.setattr(torch.cuda, 'max_memory_reserved', lambda device=None: 9)
    meter = PeakMeter(cuda=True, device='cuda:1').start()
    assert calls == [('reset', 'cuda:1')] and meter.peak_bytes is None
    assert meter.stop() == 7 and meter.reserved_bytes == 9
    with PeakMeter(torch.zeros(3), cuda=True) as meter:
        pass
    assert calls[-1] == ('reset', None) and meter.peak_bytes == 7


def test_a_cpu_model_has_no_cuda_device():
    assert cuda_device(torch.nn.Linear(1, 1)) is None
    assert cuda_device(torch.nn.ReLU()) is None  # no parameters
