"""tools/train.py with checkpoints that do not fit the run: refused before training, naming the
file and the differences; optimizer hyper-parameters changed on resume are said, and used."""
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch

from tests.helpers.configs import TOY_CFG

pytestmark = pytest.mark.subprocess

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TRAIN = osp.join(ROOT, 'tools', 'train.py')
CFG = TOY_CFG + "runner = dict(type='IterBasedRunner', max_iters=8)\n"


def _train(tmp_path, work, *args):
    cfg = tmp_path / 'toy.py'
    cfg.write_text(CFG)
    return subprocess.run([sys.executable, TRAIN, str(cfg), '--work-dir', str(work)]
                          + list(args), cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_resume_and_load_from_another_model_fail_before_training(tmp_path):
    first = _train(tmp_path, tmp_path / 'first')
    assert first.returncode == 0, first.stderr[-3000:]
    ckpt = tmp_path / 'first' / 'iter_4.pth'
    work = tmp_path / 'other'
    proc = _train(tmp_path, work, '--resume-from', str(ckpt), '--cfg-options', 'model.hidden=16')
    assert proc.returncode == 1
    assert f'error: cannot resume from {ckpt}' in proc.stderr
    assert '3 shape mismatches: fc1.weight [8, 4] in the checkpoint, [16, 4] in the model, ' \
           'fc1.bias [8] in the checkpoint, [16] in the model, fc2.weight [1, 8]' in proc.stderr
    assert 'momentum_buffer' not in proc.stderr  # follows from the model's shapes
    assert 'training did not start' in proc.stderr and not list(work.glob('iter_*.pth'))
    proc = _train(tmp_path, work, '--load-from', str(ckpt), '--cfg-options', 'model.hidden=16')
    assert proc.returncode == 1
    assert f"checkpoint {ckpt} is not a checkpoint of this model: only 1 of the model's 4 " \
           'tensors would load from it' in proc.stderr
    assert not list(work.glob('iter_*.pth'))


@pytest.mark.slow
def test_a_changed_lr_on_resume_is_named_and_used(tmp_path):
    """mmcv (and this runner before) restored the checkpoint's lr with the optimizer state,
    and the lr hook computed its schedule from the checkpoint's ``initial_lr``: the lower lr
    that a diverging run is resumed with had no effect."""
    full = _train(tmp_path, tmp_path / 'full')
    assert full.returncode == 0, full.stderr[-3000:]
    ckpt = tmp_path / 'full' / 'iter_4.pth'
    work = tmp_path / 'resumed'
    proc = _train(tmp_path, work, '--resume-from', str(ckpt), '--cfg-options', 'optimizer.lr=0.5')
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = open(next(str(p) for p in work.glob('*.log'))).read()
    assert f'optimizer hyper-parameters differ from the checkpoint: lr 0.05 in {ckpt}, 0.5 ' \
           "in the config (param groups 0). The run uses the config's values" in log
    reference = torch.load(tmp_path / 'full' / 'iter_8.pth', weights_only=True)
    resumed = torch.load(work / 'iter_8.pth', weights_only=True)
    (ref_group, ), (group, ) = (reference['optimizer']['param_groups'],
                                resumed['optimizer']['param_groups'])
    assert ref_group['initial_lr'] == 0.05 and group['initial_lr'] == 0.5
    assert abs(group['lr'] - 10 * ref_group['lr']) < 1e-12  # the same schedule, from 0.5
    assert resumed['meta']['optimizer_hparams']['param_groups'][0]['lr'] == 0.5
