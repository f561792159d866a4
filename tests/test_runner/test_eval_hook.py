import os
import os.path as osp
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from ckptzoo.apis import collect_results, multi_gpu_test, single_gpu_test
from ckptzoo.registry import build_hook
from ckptzoo.runner.hooks import CheckpointHook, DistEvalHook, EvalHook, TextLoggerHook
from tests.helpers.hook_fakes import FakeRunner
from tests.helpers.toy import ToyDataset, loader, make_model, quiet_logger


class ScoredDataset(Dataset):
    """``evaluate`` returns the next of the scripted results and records its calls."""

    def __init__(self, scores, n=5):
        self.scores = list(scores)
        self.n = n
        self.calls = []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return dict(img=torch.full((2,), float(i)))

    def evaluate(self, results, logger=None, **kwargs):
        self.calls.append((list(results), logger, kwargs))
        return dict(self.scores[len(self.calls) - 1])


def _test_fn(model, data_loader):
    return list(range(len(data_loader.dataset)))


def _hook(scores, **kwargs):
    dataset = ScoredDataset(scores)
    kwargs.setdefault('test_fn', _test_fn)
    return EvalHook(DataLoader(dataset, batch_size=2), **kwargs), dataset


def _best_files(path):
    return sorted(p.name for p in path.iterdir() if p.name.startswith('best_'))


def test_evaluates_every_interval_epochs(tmp_path):
    hook, dataset = _hook([{'mAP': 0.1}, {'mAP': 0.2}], interval=2, metric='mAP')
    runner = FakeRunner(tmp_path)
    runner.register_hook(hook, 'LOW')
    runner.run_epochs([0], max_epochs=5)
    assert len(dataset.calls) == 2  # after epochs 2 and 4
    results, logger, kwargs = dataset.calls[0]
    assert results == [0, 1, 2, 3, 4] and logger is runner.logger and kwargs == {'metric': 'mAP'}


def test_start_and_interval(tmp_path):
    evaluated = []

    def test_fn(model, data_loader):
        evaluated.append(runner.epoch + 1)
        return []

    hook, _ = _hook([{'acc': 0.}] * 10, start=1, interval=2, test_fn=test_fn)
    runner = FakeRunner(tmp_path)
    runner.register_hook(hook, 'LOW')
    runner.run_epochs([0], max_epochs=6)
    assert evaluated == [1, 3, 5]


def test_by_iter(tmp_path):
    evaluated = []

    def test_fn(model, data_loader):
        evaluated.append(runner.iter + 1)
        return []

    hook, _ = _hook([{'acc': 0.}] * 10, by_epoch=False, interval=3, test_fn=test_fn)
    runner = FakeRunner(tmp_path)
    runner.register_hook(hook, 'LOW')
    runner.run_iters([0, 1], max_iters=7)
    assert evaluated == [3, 6]


def test_save_best_greater_for_map(tmp_path):
    hook, _ = _hook([{'bbox_mAP': s} for s in (0.3, 0.5, 0.4, 0.6)], save_best='bbox_mAP')
    assert hook.rule == 'greater'
    runner = FakeRunner(tmp_path, meta={})
    runner.register_hook(hook, 'LOW')
    seen = []
    orig_save = runner.save_checkpoint

    def save_checkpoint(out_dir, **kwargs):
        orig_save(out_dir, **kwargs)
        seen.append(_best_files(tmp_path))

    runner.save_checkpoint = save_checkpoint
    runner.run_epochs([0], max_epochs=4)
    # saved at epochs 1, 2 and 4; each time the previous best was removed first
    assert seen == [['best_bbox_mAP_epoch_1.pth'], ['best_bbox_mAP_epoch_2.pth'],
                    ['best_bbox_mAP_epoch_4.pth']]
    assert runner.meta['hook_msgs']['best_score'] == 0.6
    assert runner.meta['hook_msgs']['best_ckpt'] == osp.join(str(tmp_path),
                                                             'best_bbox_mAP_epoch_4.pth')
    assert runner.log_buffer.output['bbox_mAP'] == 0.6 and runner.log_buffer.ready


def test_save_best_less_for_loss_by_iter(tmp_path):
    hook, _ = _hook([{'val_loss': s} for s in (0.5, 0.3, 0.4)], save_best='val_loss',
                    by_epoch=False, interval=2)
    assert hook.rule == 'less'
    runner = FakeRunner(tmp_path, meta={})
    runner.register_hook(hook, 'LOW')
    runner.run_iters([0], max_iters=6)
    assert _best_files(tmp_path) == ['best_val_loss_iter_4.pth']
    assert runner.meta['hook_msgs']['best_score'] == 0.3


def test_save_best_auto_and_zero_score(tmp_path):
    # the first key decides; a best score of exactly 0 is still saved (mmcv skipped it)
    hook, _ = _hook([{'loss': 0.0, 'acc': 0.9}, {'loss': 0.1, 'acc': 1.0}], save_best='auto')
    runner = FakeRunner(tmp_path, meta={})
    runner.register_hook(hook, 'LOW')
    runner.run_epochs([0], max_epochs=2)
    assert hook.key_indicator == 'loss' and hook.rule == 'less'
    assert _best_files(tmp_path) == ['best_loss_epoch_1.pth']


def test_resume_removes_recorded_best(tmp_path):
    (tmp_path / 'best_acc_epoch_1.pth').write_text('old')
    meta = dict(hook_msgs=dict(best_score=0.5, best_ckpt=str(tmp_path / 'best_acc_epoch_1.pth')))
    hook, _ = _hook([{'acc': 0.4}, {'acc': 0.7}], save_best='acc')
    runner = FakeRunner(tmp_path, meta=meta)
    runner.epoch = runner.iter = 1  # resumed after epoch 1
    runner.register_hook(hook, 'LOW')
    runner.run_epochs([0], max_epochs=3)
    assert _best_files(tmp_path) == ['best_acc_epoch_3.pth']


def test_resume_keeps_best_of_another_run(tmp_path):
    """Run B resumed from run A's checkpoint, and a copy of run A's work dir resumed in the
    copy: run A's best checkpoint stays; its score carries over (mmcv); B's best goes to B."""
    run_a = tmp_path / 'run_a'
    run_a.mkdir()
    (run_a / 'best_acc_epoch_1.pth').write_text('run A')
    for work in ('run_b', 'run_a_copy'):
        work_dir = tmp_path / work
        work_dir.mkdir()
        if work == 'run_a_copy':
            (work_dir / 'best_acc_epoch_1.pth').write_text('run A')
        meta = dict(hook_msgs=dict(best_score=0.5,
                                   best_ckpt=str(run_a / 'best_acc_epoch_1.pth')))
        hook, _ = _hook([{'acc': 0.4}, {'acc': 0.7}, {'acc': 0.8}], save_best='acc')
        runner = FakeRunner(work_dir, meta=meta, name=work)
        runner.epoch = runner.iter = 1  # resumed after epoch 1
        runner.register_hook(hook, 'LOW')
        runner.run_epochs([0], max_epochs=4)
        assert (run_a / 'best_acc_epoch_1.pth').read_text() == 'run A'
        own = ['best_acc_epoch_1.pth'] if work == 'run_a_copy' else []
        assert _best_files(work_dir) == own + ['best_acc_epoch_4.pth']  # 0.4 < 0.5 saved none
        assert runner.meta['hook_msgs']['best_score'] == 0.8
        assert runner.meta['hook_msgs']['best_ckpt'] == str(work_dir / 'best_acc_epoch_4.pth')
        assert any('is not in this run\'s out_dir' in m and 'left in place' in m
                   for m in runner.log_handler.messages)


def test_resume_from_another_runs_checkpoint_with_the_real_runner(tmp_path):
    """`--resume-from run_a/epoch_2.pth` in run B: the best path comes out of the checkpoint
    (epoch_1.pth is saved before the evaluation of epoch 1, as in mmcv)."""
    from ckptzoo.runner import EpochBasedRunner

    def run(work_dir, scores, resume=None):
        model = make_model()
        runner = EpochBasedRunner(model, optimizer=torch.optim.SGD(model.parameters(), lr=.01),
                                  work_dir=str(work_dir), logger=quiet_logger(), max_epochs=3,
                                  meta=dict())
        runner.register_training_hooks(None, dict(), dict(interval=1))
        runner.register_hook(_hook(scores, save_best='acc')[0], 'LOW')
        if resume:
            runner.resume(resume)
        runner.run([loader(ToyDataset(2), 1)], [('train', 1)])
        return runner

    run(tmp_path / 'a', [{'acc': s} for s in (0.5, 0.3, 0.4)])
    assert _best_files(tmp_path / 'a') == ['best_acc_epoch_1.pth']
    runner = run(tmp_path / 'b', [{'acc': 0.9}], resume=str(tmp_path / 'a' / 'epoch_2.pth'))
    assert _best_files(tmp_path / 'a') == ['best_acc_epoch_1.pth']  # run A's best is kept
    assert _best_files(tmp_path / 'b') == ['best_acc_epoch_3.pth']
    assert runner.meta['hook_msgs']['best_score'] == 0.9


def test_best_in_another_out_dir_is_not_removed(tmp_path):
    """The same with out_dir set: the recorded best under the work_dir is another place."""
    (tmp_path / 'best_acc_epoch_1.pth').write_text('kept')
    meta = dict(hook_msgs=dict(best_score=0.5, best_ckpt=str(tmp_path / 'best_acc_epoch_1.pth')))
    hook, _ = _hook([{'acc': 0.7}], save_best='acc', out_dir=str(tmp_path / 'out'))
    runner = FakeRunner(tmp_path, meta=meta)
    runner.epoch = runner.iter = 1
    runner.register_hook(hook, 'LOW')
    runner.run_epochs([0], max_epochs=2)
    assert (tmp_path / 'best_acc_epoch_1.pth').read_text() == 'kept'
    assert _best_files(tmp_path / 'out' / tmp_path.name) == ['best_acc_epoch_2.pth']


def test_results_are_logged_as_val(tmp_path):
    hook, _ = _hook([{'bbox_mAP': 0.25}])
    runner = FakeRunner(tmp_path)
    runner.register_hook(hook, 'LOW')
    runner.register_hook(CheckpointHook(interval=1), 'NORMAL')
    runner.register_hook(TextLoggerHook(interval=1), 'VERY_LOW')
    runner.run_epochs([0], max_epochs=1)
    # 5 samples in batches of 2: 3 val iterations
    assert runner.log_handler.messages[-1] == 'Epoch(val) [1][3]\tbbox_mAP: 0.2500'


def test_rule_errors():
    with pytest.raises(ValueError, match="cannot infer the rule for key 'foo'"):
        _hook([], save_best='foo')
    with pytest.raises(KeyError, match='rule must be "greater", "less" or None'):
        _hook([], save_best='acc', rule='bigger')
    with pytest.raises(TypeError, match='dataloader must be a torch DataLoader'):
        EvalHook([1, 2])
    hook, _ = _hook([], save_best='score', rule='greater')
    assert hook.rule == 'greater'
    hook, _ = _hook([], save_best='Recall', greater_keys=['recall'])
    assert hook.rule == 'greater'


def test_built_from_registry_with_default_test_fn():
    dataset = ScoredDataset([])
    hook = build_hook(dict(type='EvalHook', dataloader=DataLoader(dataset), interval=2))
    assert hook.test_fn is single_gpu_test and hook.interval == 2
    hook = DistEvalHook(DataLoader(dataset))
    assert hook.test_fn is multi_gpu_test and hook.broadcast_bn_buffer


class TinyDetector(torch.nn.Module):
    """Returns one result per image, and records how it was called."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(2.))
        self.calls = []

    def forward(self, img, return_loss=True, rescale=False):
        self.calls.append((return_loss, rescale, self.training, torch.is_grad_enabled()))
        return [(x * self.scale).sum().item() for x in img]


def test_single_gpu_test():
    model = TinyDetector()
    model.train()
    loader = DataLoader(ScoredDataset([]), batch_size=2)
    results = single_gpu_test(model, loader)
    # image i is full of i (2 values), times 2
    assert results == [0., 4., 8., 12., 16.]
    assert model.calls == [(False, True, False, False)] * 3
    assert model.training  # put back


def test_collect_results_single_process():
    assert collect_results([1, 2, 3, 4], 3) == [1, 2, 3]


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _dist_worker(rank, world_size, port, out):
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    dist.init_process_group('gloo', rank=rank, world_size=world_size)
    try:
        dataset = ScoredDataset([], n=5)
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
        loader = DataLoader(dataset, batch_size=2, sampler=sampler)
        results = multi_gpu_test(TinyDetector(), loader)
        torch.save(results, osp.join(out, f'rank{rank}.pt'))
    finally:
        dist.destroy_process_group()


@pytest.mark.subprocess
def test_multi_gpu_test_gathers_in_dataset_order(tmp_path):
    # 5 samples over 2 ranks: rank 0 gets 0, 2, 4 and rank 1 gets 1, 3, 0 (padding)
    # fork: the children need not import torch again
    mp.start_processes(_dist_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2,
                       start_method='fork')
    for rank in range(2):
        assert torch.load(tmp_path / f'rank{rank}.pt') == [0., 4., 8., 12., 16.]


def test_by_iter_training_line_before_eval_line(tmp_path):
    def step(runner, batch):
        runner.log_buffer.update({'data_time': 0.5, 'time': 1.0})
        return dict(log_vars={'loss': 2.0}, num_samples=1)

    hook, _ = _hook([{'acc': 0.75}, {'acc': 0.5}], by_epoch=False, interval=2)
    runner = FakeRunner(tmp_path, step_fn=step)
    runner.register_hook(hook, 'LOW')
    runner.register_hook(TextLoggerHook(interval=2, by_epoch=False), 'VERY_LOW')
    runner.run_iters([0], max_iters=4)
    lines = [m for m in runner.log_handler.messages if m.startswith('Iter')]
    assert [line.split('\t')[0] for line in lines] == ['Iter [2/4]', 'Iter(val) [3]',
                                                       'Iter [4/4]', 'Iter(val) [3]']
    assert lines[0].endswith('loss: 2.0000') and 'acc' not in lines[0]
    assert lines[1] == 'Iter(val) [3]\tacc: 0.7500'


def test_eval_arguments_are_checked_at_construction(tmp_path):
    """The keys that are not the hook's go to ``dataset.evaluate``: a typo or a metric of
    another task (mmcv: a KeyError at the first evaluation, after an epoch) fails here."""
    from ckptzoo.datasets import ConcatDataset, SyntheticClassificationDataset
    dataset = SyntheticClassificationDataset(num_samples=4, num_classes=2, img_size=8)
    loader = DataLoader(dataset)
    with pytest.raises(ValueError, match="metric 'bbox' is not a metric of "
                       "SyntheticClassificationDataset: allowed 'accuracy'"):
        EvalHook(loader, metric='bbox')
    with pytest.raises(KeyError, match=r"'evaluation.metrc' \(did you mean 'evaluation.metric'"):
        EvalHook(loader, metrc='accuracy')
    with pytest.raises(ValueError, match="metric 'mAP' is not a metric"):  # inside a concat
        DistEvalHook(DataLoader(ConcatDataset([dataset, dataset])), metric='mAP')
    hook = EvalHook(loader, interval=2, metric='accuracy', metric_options=dict(topk=(1, )))
    assert hook.eval_kwargs == dict(metric='accuracy', metric_options=dict(topk=(1, )))


def test_dynamic_intervals_as_mmdet(tmp_path):
    # every 3 epochs, then every epoch from epoch 7 (1-based): after epochs 3, 6, 7, 8
    hook, dataset = _hook([{'mAP': 0.1}] * 10, interval=3, dynamic_intervals=[(7, 1)])
    runner = FakeRunner(tmp_path)
    runner.register_hook(hook, 'LOW')
    evaluated = []
    hook_evaluate = hook._do_evaluate
    hook._do_evaluate = lambda r: (evaluated.append(r.epoch + 1), hook_evaluate(r))
    runner.run_epochs([0], max_epochs=8)
    assert evaluated == [3, 6, 7, 8]
    with pytest.raises(ValueError, match='dynamic_intervals must be a list of'):
        _hook([], dynamic_intervals=[(7, 1), (5, 2)])
