"""Observers (``checkpointing.observe``): every unit call and every recompute is seen, in
execution order, with the results of the plain run; observers nest, and none stays registered
after the block, even when it raises."""
import pytest
import torch

from ckptzoo.models import ResNet
from ckptzoo.models.checkpointing import CheckpointObserver, observe, observers

from tests.helpers.checkpointing import one_thread, run_once

one_thread = pytest.fixture(autouse=True)(one_thread)


class Spy(CheckpointObserver):
    """Names the units it sees called, and the unit whose forward each recompute repeats."""

    def __init__(self, names):
        self.names, self.calls, self.recomputes = names, [], []
        self.current, self.regions = None, {}

    def unit_call(self, run, unit, function, args, module):
        self.calls.append(self.names[id(unit)])
        self.current = self.names[id(unit)]
        try:
            return run()
        finally:
            self.current = None

    def region_call(self, run, region, recomputing):
        if recomputing:
            self.recomputes.append(self.regions[region])
        else:
            self.regions[region] = self.current
        return run()


def _resnet():
    torch.manual_seed(0)
    model = ResNet(18, base_channels=4, out_indices=(1, 3), norm_eval=False).train()
    model.set_checkpoint_plan({'*': 'full', 'layer2': None})
    return model


def test_observers_see_every_unit_call_and_recompute():
    model = _resnet()
    names = {id(unit): name for name, unit in model.checkpoint_units().items()}
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    ref = run_once(_resnet(), x, seed=5)
    with observe(Spy(names)) as spy, observe(CheckpointObserver()):
        got = run_once(model, x, seed=5)
    assert spy.calls == list(names.values())
    checkpointed = [n for n in names.values() if not n.startswith('layer2.')]
    assert spy.recomputes == checkpointed[::-1]  # backward runs them in reverse
    for a, b in zip(ref[0] + [ref[1]], got[0] + [got[1]]):
        assert torch.equal(a, b)
    assert observers._observers == []


def test_an_observer_is_removed_when_the_block_raises():
    with pytest.raises(RuntimeError, match='inside'):
        with observe(CheckpointObserver()):
            assert len(observers._observers) == 1
            raise RuntimeError('inside')
    assert observers._observers == []
