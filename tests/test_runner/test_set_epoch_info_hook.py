import pytest
import torch

from ckptzoo.registry import build_hook
from tests.helpers.hook_fakes import FakeRunner


class _Model(torch.nn.Linear):
    def __init__(self):
        super().__init__(2, 2)
        self.epochs = []

    def set_epoch(self, epoch):
        self.epochs.append(epoch)


def test_sets_the_epoch_before_each_train_epoch(tmp_path):
    model = _Model()
    runner = FakeRunner(tmp_path, model=torch.nn.DataParallel(model))
    runner.step_fn = lambda runner, batch: dict(log_vars={}, num_samples=1)
    runner.register_hook(build_hook(dict(type='SetEpochInfoHook')), 'NORMAL')
    runner.run_epochs([[0]], max_epochs=3)
    assert model.epochs == [0, 1, 2]  # through the wrapper


def test_a_model_without_set_epoch_is_named(tmp_path):
    runner = FakeRunner(tmp_path)
    with pytest.raises(AttributeError, match='needs a model with set_epoch'):
        build_hook(dict(type='SetEpochInfoHook')).before_train_epoch(runner)
