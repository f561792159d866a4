"""LiveTensorTracker: the peak of live tensor storage equals bytes computed by hand."""
import gc

import torch

from ckptzoo.memory.measure.trackers import LiveTensorTracker, peak_live_bytes

F32 = 4


def test_peak_of_known_tensors():
    a = torch.zeros(1000)                       # 4000 B, exists before tracking
    untouched = torch.zeros(10_000)             # never tracked nor used: not counted
    with LiveTensorTracker() as tracker:
        assert tracker.track(a) == 4000
        view = a.view(10, 100)                  # a view: same storage, nothing new
        a.add_(1)                               # in place: nothing new
        b = a + 1                               # 8000
        c = b * 2                               # 12000
        del b                                   # 8000
        d = torch.empty(500, dtype=torch.float64)   # 12000
        e = c[:10].clone()                      # 12040: the peak
        del c, d                                # 4040
        f = torch.ones(1000)                    # 8040
        live_before_resize = tracker.live_bytes
        f.resize_(2000)                         # the storage grows to 8000 B: 12040
        live_after_resize = tracker.live_bytes
        del view, e
    assert live_before_resize == 8040
    assert live_after_resize == 12040
    assert tracker.peak_bytes == 12040
    assert tracker.baseline_bytes == 4000
    assert tracker.live_bytes == 12040 - 40     # e freed; a and f live
    del untouched


def test_storage_freed_only_when_its_last_view_dies():
    with LiveTensorTracker() as tracker:
        x = torch.ones(256)                     # 1024 B
        tail = x[128:]
        del x
        gc.collect()
        assert tracker.live_bytes == 1024       # still held by the view
        del tail
        assert tracker.live_bytes == 0
        y = torch.ones(64)                      # 256 B
    assert tracker.peak_bytes == 1024
    del y


def test_backward_and_gradients_are_counted():
    torch.manual_seed(0)
    n, i, o = 8, 32, 16
    w = torch.randn(o, i, requires_grad=True)
    x = torch.randn(n, i)

    def step():
        y = x @ w.t()                           # n*o, saved: x (for w's gradient)
        loss = y.relu().sum()                   # relu output n*o (saved) and a scalar
        del y
        loss.backward()                         # grad of relu n*o; w.grad o*i
        return loss

    peak, loss = peak_live_bytes(step, existing=(w, x))
    # The peak is at w's gradient (the mm in backward): x and w, the loss and its unit gradient
    # (one float each), the gradient of y (n*o) and w.grad (o*i). relu's saved output (n*o) was
    # released when its backward ran; the forward's peak (x, w, y, relu out) is lower.
    assert peak == (n * i + o * i) * F32 + 2 * F32 + (n * o + o * i) * F32
    assert w.grad.shape == (o, i) and loss.ndim == 0


def test_tracks_modules_optimizers_and_gradients():
    lin = torch.nn.Linear(10, 5)                # 50 + 5 floats
    opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    lin(torch.ones(2, 10)).sum().backward()
    opt.step()                                  # momentum buffers: 55 floats
    with LiveTensorTracker() as tracker:
        live = tracker.track(lin, opt)
    assert live == (55 + 55 + 55) * F32         # parameters, gradients, momentum


def test_live_bytes_by_tag():
    x = torch.ones(10)
    with LiveTensorTracker() as tracker:
        tracker.track(x)
        tracker.tag = 'a'
        a = x * 2          # 40 bytes, tagged 'a'
        tmp = x + 1        # freed below
        tracker.tag = 'b'
        b = torch.cat([a, a])  # 80 bytes, tagged 'b'
        tracker.tag = None
        del tmp
        assert tracker.live_bytes_by_tag() == {None: 40, 'a': 40, 'b': 80}
    assert a.shape == (10,) and b.shape == (20,)
