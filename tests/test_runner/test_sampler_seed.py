from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from ckptzoo.registry import build_hook
from tests.helpers.hook_fakes import FakeRunner

DATA = list(range(8))


def _sampler():
    return DistributedSampler(DATA, num_replicas=2, rank=0, shuffle=True, seed=0)


def _orders(runner, loader, epochs):
    """The order the loader yields in each epoch, seen from a hook that runs after the seed
    hook."""
    orders = []

    class Recorder:
        priority = 100

        def before_train_epoch(self, runner):
            orders.append([int(i) for batch in loader for i in batch])

    runner.step_fn = lambda runner, batch: dict(log_vars={}, num_samples=len(batch))
    runner.register_hook(build_hook(dict(type='DistSamplerSeedHook')), 'NORMAL')
    runner.register_hook(Recorder(), 'LOWEST')
    runner.run_epochs(loader, max_epochs=epochs)
    return orders


def test_sets_epoch_on_sampler(tmp_path):
    sampler = _sampler()
    loader = DataLoader(DATA, batch_size=2, sampler=sampler)
    orders = _orders(FakeRunner(tmp_path), loader, 3)
    assert sampler.epoch == 2
    expected = []
    for epoch in range(3):
        ref = _sampler()
        ref.set_epoch(epoch)
        expected.append(list(ref))
    assert orders == expected and orders[0] != orders[1]  # a new order every epoch


def test_sets_epoch_on_batch_sampler_sampler(tmp_path):
    sampler = _sampler()
    loader = DataLoader(DATA, batch_sampler=BatchSampler(sampler, 2, drop_last=False))
    assert not hasattr(loader.sampler, 'set_epoch')  # a SequentialSampler
    _orders(FakeRunner(tmp_path), loader, 2)
    assert sampler.epoch == 1


def test_plain_loader_left_alone(tmp_path):
    loader = DataLoader(DATA, batch_size=4)
    assert _orders(FakeRunner(tmp_path), loader, 2) == [DATA, DATA]
