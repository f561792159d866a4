import os.path as osp

import pytest

from ckptzoo.registry import build_hook
from ckptzoo.runner.hooks import CheckpointHook
from tests.helpers.hook_fakes import FakeRunner


def _files(path):
    return sorted(p.name for p in path.iterdir())


def test_by_epoch_interval_and_last(tmp_path):
    runner = FakeRunner(tmp_path, meta={})
    runner.register_hook(CheckpointHook(interval=2, save_optimizer=False), 'NORMAL')
    runner.run_epochs([0, 1, 2], max_epochs=5)
    assert [(s[1], s[2], s[3]) for s in runner.saved] == [
        ('epoch_2.pth', False, 1), ('epoch_4.pth', False, 3), ('epoch_5.pth', False, 4)]
    assert runner.meta['hook_msgs']['last_ckpt'] == osp.join(str(tmp_path), 'epoch_5.pth')


def test_save_last_false(tmp_path):
    runner = FakeRunner(tmp_path)
    runner.register_hook(CheckpointHook(interval=2, save_last=False), 'NORMAL')
    runner.run_epochs([0], max_epochs=5)
    assert [s[1] for s in runner.saved] == ['epoch_2.pth', 'epoch_4.pth']


def test_by_iter_interval_last_and_max_keep(tmp_path):
    runner = FakeRunner(tmp_path, meta={})
    hook = build_hook(dict(type='CheckpointHook', interval=4, by_epoch=False, max_keep_ckpts=2))
    runner.register_hook(hook, 'NORMAL')
    runner.run_iters(list(range(3)), max_iters=10)
    assert [(s[1], s[4]) for s in runner.saved] == [
        ('iter_4.pth', 3), ('iter_8.pth', 7), ('iter_10.pth', 9)]
    # the last checkpoint is off the interval: still only two are kept (mmcv kept three)
    assert _files(tmp_path) == ['iter_10.pth', 'iter_8.pth']
    assert runner.meta['hook_msgs']['last_ckpt'] == osp.join(str(tmp_path), 'iter_10.pth')


def test_max_keep_by_epoch(tmp_path):
    (tmp_path / 'epoch_9.pth').write_text('from an earlier, longer run')
    (tmp_path / 'notes.txt').write_text('kept')
    runner = FakeRunner(tmp_path)
    runner.register_hook(CheckpointHook(interval=1, max_keep_ckpts=2), 'NORMAL')
    runner.run_epochs([0], max_epochs=4)
    assert len(runner.saved) == 4
    assert _files(tmp_path) == ['epoch_3.pth', 'epoch_4.pth', 'epoch_9.pth', 'notes.txt']


def test_filename_tmpl_and_out_dir(tmp_path):
    work_dir = tmp_path / 'work_dirs' / 'exp'
    work_dir.mkdir(parents=True)
    runner = FakeRunner(work_dir, meta={})
    hook = CheckpointHook(interval=1, out_dir=str(tmp_path / 'ckpts'), max_keep_ckpts=1,
                          filename_tmpl='ckpt_{:03d}.pth')
    runner.register_hook(hook, 'NORMAL')
    runner.run_epochs([0], max_epochs=3)
    out = tmp_path / 'ckpts' / 'exp'  # mmcv: out_dir + the work_dir's basename
    assert hook.out_dir == str(out)
    assert {s[0] for s in runner.saved} == {str(out)}
    assert _files(out) == ['ckpt_003.pth']
    assert runner.meta['hook_msgs']['last_ckpt'] == str(out / 'ckpt_003.pth')


def test_only_rank_zero_saves(tmp_path):
    runner = FakeRunner(tmp_path, rank=1, world_size=2)
    runner.register_hook(CheckpointHook(interval=1), 'NORMAL')
    runner.run_epochs([0], max_epochs=2)
    assert runner.saved == []


def test_bad_arguments():
    with pytest.raises(ValueError, match='interval must be a positive int.*got 0'):
        CheckpointHook(interval=0)
    with pytest.raises(ValueError, match='max_keep_ckpts must be a positive int or -1'):
        CheckpointHook(max_keep_ckpts=0)
    with pytest.raises(ValueError, match="backend must be \"disk\" or unset, got 'petrel'"):
        CheckpointHook(file_client_args=dict(backend='petrel'))


def test_unknown_argument_fails_at_construction_with_close_match(tmp_path):
    """mmcv passed any key on to save_checkpoint: ``max_keep_ckpt=1`` failed after an epoch."""
    with pytest.raises(TypeError, match=r"'max_keep_ckpt' \(did you mean 'max_keep_ckpts'\?\)"):
        build_hook(dict(type='CheckpointHook', interval=1, max_keep_ckpt=1))
    runner = FakeRunner(tmp_path)  # mmcv's save_checkpoint arguments still pass through
    runner.register_hook(CheckpointHook(interval=1, filename_tmpl='ckpt_{}.pth',
                                        create_symlink=False), 'NORMAL')
    runner.run_epochs([0], max_epochs=1)
    assert runner.saved[0][1] == 'ckpt_1.pth'
