"""tools/train.py with a model that draws random numbers (dropout), 2 gloo ranks seeded
differently (``--diff-seed``), evaluation after each epoch: preempted inside an epoch (SIGTERM
to rank 1) and resumed, or resumed from the checkpoint at an epoch's end, it ends with the
weights and optimizer state of the uninterrupted run."""
import socket

import pytest
import torch
import torch.distributed as dist

from tests.helpers.faults import start_train, wait

pytestmark = pytest.mark.subprocess

CFG = """
custom_imports = dict(imports=['tests.helpers.toy', 'tests.helpers.faults'],
                      allow_failed_imports=False)
model = dict(type='DropoutRegressor')
data = dict(samples_per_gpu=1, workers_per_gpu=0,
            train=dict(type='ToyDataset', num_samples=8),
            val=dict(type='ToyEvalDataset', num_samples=3, seed=1))
optimizer = dict(type='SGD', lr=0.05, momentum=0.9)
optimizer_config = dict()
lr_config = dict(policy='step', step=[100])
runner = dict(type='EpochBasedRunner', max_epochs=3)
checkpoint_config = dict(interval=1, by_epoch=False)
evaluation = dict(interval=1)
log_config = dict(interval=1, hooks=[dict(type='TextLoggerHook')])
custom_hooks = [dict(type='FaultHook')]
workflow = [('train', 1)]
seed = 0
"""


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _start_2_ranks(argv, log_prefix, fault=''):
    port = str(_free_port())
    return [start_train(argv + ['--launcher', 'pytorch', '--diff-seed'],
                        f'{log_prefix}_rank{rank}.txt', RANK=str(rank), LOCAL_RANK=str(rank),
                        WORLD_SIZE='2', MASTER_ADDR='127.0.0.1', MASTER_PORT=port,
                        CKPTZOO_FAULT=fault)
            for rank in range(2)]


def _load(path):
    return torch.load(path, map_location='cpu', weights_only=True)


@pytest.mark.skipif(not dist.is_available(), reason='torch.distributed is not available')
def test_dropout_with_diff_seed_resumes_exactly_on_every_rank(tmp_path):
    cfg = tmp_path / 'cfg.py'
    cfg.write_text(CFG)
    full = tmp_path / 'full'
    assert wait(_start_2_ranks([str(cfg), '--work-dir', str(full)], tmp_path / 'full')) \
        == [0, 0], (tmp_path / 'full_rank0.txt').read_text()[-3000:]
    # 4 iterations an epoch per rank: 6 is inside epoch 2, 8 its end (then an evaluation)
    term = [str(cfg), '--work-dir', str(tmp_path / 'from_6'), '--auto-resume']
    procs = _start_2_ranks(term, tmp_path / 'term', fault='TERM:iter:6:1') + _start_2_ranks(
        [str(cfg), '--work-dir', str(tmp_path / 'from_8'), '--resume-from',
         str(full / 'iter_8.pth')], tmp_path / 'from_8')
    assert wait(procs) == [143, 143, 0, 0], (tmp_path / 'term_rank0.txt').read_text()[-3000:]
    states = _load(tmp_path / 'from_6' / 'preempted_iter_6.pth')['meta']['rng_state']
    assert len(states) == 2 and states[0]['torch'] != states[1]['torch']  # each rank's own
    assert wait(_start_2_ranks(term, tmp_path / 'from_6')) == [0, 0], \
        (tmp_path / 'from_6_rank0.txt').read_text()[-3000:]
    reference = _load(full / 'latest.pth')
    assert reference['meta']['iter'] == 12
    for at in (6, 8):
        assert 'random state' not in (tmp_path / f'from_{at}_rank1.txt').read_text()
        result = _load(tmp_path / f'from_{at}' / 'latest.pth')
        for key, value in reference['state_dict'].items():
            assert torch.equal(result['state_dict'][key], value), (at, key)
        for i, state in reference['optimizer']['state'].items():
            assert torch.equal(result['optimizer']['state'][i]['momentum_buffer'],
                               state['momentum_buffer']), (at, i)
