"""StepMeter: warm-up, timed and probe steps of ``k`` iterations; memory read in the probe only,
exact on CPU."""
import torch

from ckptzoo.memory import StepMeter

F32 = 4


def _step(meter, i, lin, opt, x):
    meter.before_iter(i, (lin, opt, x))
    y = lin(x)
    loss = (y * y).sum()
    meter.after_forward(i)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss, y
    meter.after_iter(i)


def test_phases_and_exact_cpu_bytes():
    torch.manual_seed(0)
    lin = torch.nn.Linear(100, 100, bias=False)          # weight: 40000 B
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    x = torch.randn(8, 100)                              # 3200 B
    meter = StepMeter('cpu', warmup=1, iters=2, k=2)
    assert meter.total_iters == (1 + 2 + 1) * 2
    for i in range(6):                                   # warm-up and timed steps
        _step(meter, i, lin, opt, x)
    assert len(meter.times) == 2 and all(t > 0 for t in meter.times)
    assert meter.held is None and meter.saved == 0 and meter.peak_live == 0  # not measured yet
    for i in range(6, 8):                                # the probe step
        _step(meter, i, lin, opt, x)
    r = meter.result()
    assert len(r['times']) == 2                          # the probe is not timed
    # saved for backward, the weight left out: mm keeps x, y * y keeps y (one storage)
    assert r['saved'] == 8 * 100 * F32 * 2
    # at forward end, beyond what existed before: y and the scalar loss
    assert r['held'] == 8 * 100 * F32 + F32
    assert r['peak_live'] >= 100 * 100 * F32 + 8 * 100 * F32 + r['held']
    assert r['max_allocated'] is None and r['max_reserved'] is None
