"""Checkpoint I/O: atomic saves, clear errors for missing / corrupt files, key revision."""
import errno
import os
import subprocess

import pytest
import torch

from ckptzoo.runner import IterBasedRunner, OptimizerHook
from ckptzoo.runner.checkpoint import (load_checkpoint, load_file, resolve_checkpoint_path,
                                     save_checkpoint)

from tests.helpers.toy import ToyDataset, ToyRegressor, loader, make_model, quiet_logger


def test_crash_during_save_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / 'latest.pth'
    save_checkpoint(dict(state_dict=dict(w=torch.ones(3))), str(path))
    good = path.read_bytes()

    def crashing_save(obj, f, *args, **kwargs):
        f.write(b'partial bytes of a checkpoint')
        raise KeyboardInterrupt('killed while saving')

    monkeypatch.setattr(torch, 'save', crashing_save)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(dict(state_dict=dict(w=torch.zeros(3))), str(path))
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ['latest.pth']  # no temporary file left behind
    monkeypatch.undo()
    torch.testing.assert_close(load_file(str(path))['state_dict']['w'], torch.ones(3))


class _DiskOf:
    """The file ``save_checkpoint`` writes through, on a disk with ``free`` bytes left: a write
    past them fails with ``errno_`` as the OS would (torch's zip writer turns that into its
    ``RuntimeError: [enforce fail at inline_container.cc:...]``)."""

    def __init__(self, f, free, errno_=errno.ENOSPC):
        self.f, self.free, self.errno = f, free, errno_

    def write(self, data):
        if len(memoryview(data).cast('B')) > self.free:
            raise OSError(self.errno, os.strerror(self.errno))
        self.free -= len(memoryview(data).cast('B'))
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def _disk_with(monkeypatch, free, errno_=errno.ENOSPC):
    real = os.fdopen
    monkeypatch.setattr(os, 'fdopen', lambda *a, **k: _DiskOf(real(*a, **k), free, errno_))


def test_torch_writer_error_on_a_full_disk_is_the_documented_oserror(tmp_path, monkeypatch):
    save_checkpoint(dict(state_dict=dict(w=torch.ones(3))), str(tmp_path / 'iter_1.pth'))
    _disk_with(monkeypatch, free=100_000)
    with pytest.raises(OSError) as err:
        save_checkpoint(dict(state_dict=dict(w=torch.zeros(2**18))), str(tmp_path / 'iter_2.pth'))
    monkeypatch.undo()
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(tmp_path / 'iter_2.pth')
    assert str(err.value).startswith(
        f'[Errno 28] No space left on device while saving checkpoint {tmp_path}/iter_2.pth: it '
        f'needs at least 1048576 bytes (1.0 MiB) of tensors, ')
    assert 'inline_container.cc' in str(err.value.__cause__)  # torch's own error, kept
    assert os.listdir(tmp_path) == ['iter_1.pth']  # no temporary file left
    torch.testing.assert_close(load_file(str(tmp_path / 'iter_1.pth'))['state_dict']['w'],
                               torch.ones(3))


def test_other_writer_errors_stay_runtime_errors(tmp_path, monkeypatch):
    _disk_with(monkeypatch, free=100, errno_=errno.EIO)
    with pytest.raises(RuntimeError, match='inline_container.cc'):
        save_checkpoint(dict(state_dict=dict(w=torch.zeros(1000))), str(tmp_path / 'x.pth'))
    assert os.listdir(tmp_path) == []


@pytest.fixture
def tmpfs_3m(tmp_path):
    """A real 3 MiB tmpfs (needs root and a sandbox that allows mounting, else skipped)."""
    mnt = tmp_path / 'tmpfs'
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ['mount', '-t', 'tmpfs', '-o', 'size=3m', 'tmpfs', str(mnt)],
            capture_output=True).returncode != 0:
        pytest.skip('cannot mount a tmpfs here')
    try:
        yield mnt
    finally:
        subprocess.run(['umount', str(mnt)], check=True)


@pytest.mark.subprocess
def test_full_tmpfs_during_training(tmp_path, tmpfs_3m):
    """ENOSPC on a real full disk at the 4th save: the documented OSError, nothing lost."""
    torch.manual_seed(0)
    model = ToyRegressor(in_features=1000, hidden=100)  # 400 KiB of fc1, as much momentum
    runner = IterBasedRunner(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01,
                                                              momentum=0.9),
                             work_dir=str(tmpfs_3m), logger=quiet_logger(), max_iters=6)
    runner.register_training_hooks(None, dict(), dict(interval=1, by_epoch=False))
    with pytest.raises(OSError) as err:
        runner.run([loader(ToyDataset(6, in_features=1000), 1)], [('train', 1)])
    assert err.value.errno == errno.ENOSPC
    assert f'while saving checkpoint {tmpfs_3m}/iter_4.pth: it needs at least ' in str(err.value)
    assert f'are free in {tmpfs_3m}.' in str(err.value)
    assert sorted(os.listdir(tmpfs_3m)) == ['iter_1.pth', 'iter_2.pth', 'iter_3.pth',
                                            'latest.pth']
    resumed = IterBasedRunner(ToyRegressor(in_features=1000, hidden=100),
                              work_dir=str(tmp_path / 'r'), logger=quiet_logger(), max_iters=6)
    resumed.resume(str(tmpfs_3m / 'latest.pth'))
    assert resumed.iter == 3


def test_missing_and_corrupt_checkpoints_name_the_file(tmp_path):
    runner = IterBasedRunner(make_model(), optimizer=torch.optim.SGD(make_model().parameters(),
                                                                     lr=0.1),
                             logger=quiet_logger(), max_iters=2)
    missing = tmp_path / 'nope.pth'
    with pytest.raises(FileNotFoundError, match=f'checkpoint file not found: {missing}'):
        runner.resume(str(missing))
    corrupt = tmp_path / 'corrupt.pth'
    corrupt.write_bytes(b'this is not a checkpoint')
    with pytest.raises(RuntimeError, match=f'checkpoint {corrupt} is corrupt'):
        runner.resume(str(corrupt))
    weights_only = tmp_path / 'weights.pth'
    torch.save(make_model().state_dict(), weights_only)
    with pytest.raises(KeyError, match='not a training checkpoint'):
        runner.resume(str(weights_only))


def test_runner_saves_completed_iterations_and_strips_module_prefix(tmp_path):
    model = make_model()
    runner = IterBasedRunner(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                             work_dir=str(tmp_path), logger=quiet_logger(), max_iters=3)
    runner.register_hook(OptimizerHook(), 'ABOVE_NORMAL')
    runner.run([loader(ToyDataset(4), 1)], [('train', 1)])
    path = runner.save_checkpoint(str(tmp_path))
    ckpt = load_file(path)
    assert os.path.basename(path) == 'iter_3.pth' and ckpt['meta']['iter'] == 3
    assert os.path.realpath(tmp_path / 'latest.pth') == os.path.realpath(path)
    wrapped = dict(state_dict={f'module.{k}': v for k, v in ckpt['state_dict'].items()})
    torch.save(wrapped, tmp_path / 'ddp.pth')
    fresh = make_model(seed=1)
    load_checkpoint(fresh, str(tmp_path / 'ddp.pth'), strict=True)
    for key, value in model.state_dict().items():
        torch.testing.assert_close(fresh.state_dict()[key], value, rtol=0, atol=0)


def test_runner_constructor_checks(tmp_path):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match='only one of max_epochs and max_iters'):
        IterBasedRunner(model, optimizer=opt, max_iters=2, max_epochs=1)
    with pytest.raises(TypeError, match='optimizer must be a torch Optimizer'):
        IterBasedRunner(model, optimizer='SGD', max_iters=2)
    with pytest.raises(TypeError, match=r'must have a train_step\(\) method'):
        IterBasedRunner(torch.nn.Linear(2, 2), optimizer=opt, max_iters=2)
    with pytest.raises(ValueError, match='max_iters must be a positive int, got 0'):
        IterBasedRunner(model, optimizer=opt, max_iters=0)
    runner = IterBasedRunner(model, optimizer=opt, max_iters=2, logger=quiet_logger())
    with pytest.raises(ValueError, match="each workflow phase must be"):
        runner.run([loader(ToyDataset(4), 1)], [('test', 1)])


def test_runner_work_dir_empty_is_an_error_and_tilde_is_home(tmp_path, monkeypatch):
    monkeypatch.setenv('HOME', str(tmp_path / 'home'))
    monkeypatch.chdir(tmp_path)
    model = make_model()
    with pytest.raises(ValueError, match=r"work_dir is empty \(''\)"):
        IterBasedRunner(model, work_dir='', max_iters=2, logger=quiet_logger())
    runner = IterBasedRunner(model, work_dir='~/runs/x', max_iters=2, logger=quiet_logger())
    assert runner.work_dir == str(tmp_path / 'home' / 'runs' / 'x')
    assert os.listdir(tmp_path) == ['home']  # no literal ./~
    torch.save(dict(state_dict=model.state_dict()), tmp_path / 'home' / 'w.pth')
    assert resolve_checkpoint_path('~/w.pth') == str(tmp_path / 'home' / 'w.pth')


def test_hook_priorities_order():
    from ckptzoo.runner import Hook
    runner = IterBasedRunner(make_model(), max_iters=1, logger=quiet_logger())
    hooks = {name: type(name, (Hook, ), {})() for name in ('a', 'b', 'c', 'd')}
    runner.register_hook(hooks['a'], 'LOW')
    runner.register_hook(hooks['b'], 'HIGHEST')
    runner.register_hook(hooks['c'], 'LOW')
    runner.register_hook(hooks['d'], 55)
    assert [type(h).__name__ for h in runner.hooks] == ['b', 'd', 'a', 'c']
    with pytest.raises(ValueError, match="unknown priority 'URGENT'"):
        runner.register_hook(type('e', (Hook, ), {})(), 'URGENT')


@pytest.fixture
def hub_dir(tmp_path):
    old = torch.hub.get_dir()
    torch.hub.set_dir(str(tmp_path / 'hub'))
    (tmp_path / 'hub' / 'checkpoints').mkdir(parents=True)
    yield tmp_path / 'hub' / 'checkpoints'
    torch.hub.set_dir(old)


def test_openmmlab_names_resolve_from_the_hub_cache(hub_dir):
    from mmengine.runner.checkpoint import get_external_models
    url = get_external_models()['resnext101_32x4d']
    with pytest.raises(FileNotFoundError, match=r'open-mmlab://resnext101_32x4d \(https://'
                       r'.*resnext101_32x4d.*\) is not in the local torch hub cache.*put it at '
                       f'{hub_dir}'):
        resolve_checkpoint_path('open-mmlab://resnext101_32x4d')
    model = torch.nn.Linear(2, 2)
    torch.save(dict(state_dict=model.state_dict()), hub_dir / url.rsplit('/', 1)[1])
    path = resolve_checkpoint_path('open-mmlab://resnext101_32x4d')
    assert path == str(hub_dir / url.rsplit('/', 1)[1])
    assert resolve_checkpoint_path('openmmlab://resnext101_32x4d') == path
    other = torch.nn.Linear(2, 2)
    load_checkpoint(other, 'open-mmlab://resnext101_32x4d', strict=True)
    torch.testing.assert_close(other.weight, model.weight, rtol=0, atol=0)


def test_openmmlab_deprecated_and_unknown_names(hub_dir):
    from mmengine.runner.checkpoint import get_external_models
    url = get_external_models()['detectron/resnet50_caffe']
    torch.save({}, hub_dir / url.rsplit('/', 1)[1])
    with pytest.warns(UserWarning, match='open-mmlab://resnet50_caffe is deprecated in favor '
                      'of open-mmlab://detectron/resnet50_caffe'):
        assert resolve_checkpoint_path('open-mmlab://resnet50_caffe').endswith(
            url.rsplit('/', 1)[1])
    with pytest.raises(ValueError, match=r"unknown OpenMMLab model 'resnext101_32x5d'.*did you "
                       r'mean .*resnext101_32x4d'):
        resolve_checkpoint_path('open-mmlab://resnext101_32x5d')
    with pytest.raises(ValueError, match=r"unknown mmcls model 'resnet51'"):
        resolve_checkpoint_path('mmcls://resnet51')


def test_mmcls_names_load_the_backbone(hub_dir):
    from mmengine.runner.checkpoint import get_mmcls_models
    url = get_mmcls_models()['resnet50']
    w = torch.randn(2, 2)
    torch.save(dict(meta={}, state_dict={'backbone.fc.weight': w, 'head.fc.weight': w + 1}),
               hub_dir / url.rsplit('/', 1)[1])
    ckpt = load_file('mmcls://resnet50')
    assert list(ckpt) == ['state_dict'] and list(ckpt['state_dict']) == ['fc.weight']
    model = torch.nn.Module()
    model.fc = torch.nn.Linear(2, 2, bias=False)
    load_checkpoint(model, 'mmcls://resnet50', strict=True)
    torch.testing.assert_close(model.fc.weight, w, rtol=0, atol=0)
