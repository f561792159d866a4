"""Checkpoints that do not fit the run are named before anything is loaded: resume needs the
same model and optimizer, testing needs every tensor, load_from (fine-tuning) warns about a
new head and refuses an unrelated model; changed optimizer hyper-parameters are said."""
import copy
import logging

import pytest
import torch

from ckptzoo.registry import build_model
from ckptzoo.runner import IterBasedRunner
from ckptzoo.runner.checkpoint import load_checkpoint
from ckptzoo.runner.checkpoint_match import CheckpointMismatch

from tests.helpers.toy import make_model


def _classifier(depth=18, num_classes=4):
    torch.manual_seed(0)
    return build_model(dict(type='ImageClassifier',
                            backbone=dict(type='ResNet', depth=depth, base_channels=8),
                            head=dict(type='LinearClsHead', num_classes=num_classes,
                                      in_channels=64)))


def _runner(model, optim='SGD', lr=0.1, momentum=0.9, logger=None):
    if optim == 'SGD':
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=1e-4)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    return IterBasedRunner(model, optimizer=opt, logger=logger or logging.getLogger('t'),
                           max_iters=4)


def _checkpoint(tmp_path, runner):
    """A checkpoint after one real optimizer step (momentum buffers in its state)."""
    torch.manual_seed(1)
    batch = dict(img=torch.randn(2, 3, 32, 32), gt_label=torch.tensor([0, 1]))
    runner.optimizer.zero_grad()
    runner.model.train_step(batch, runner.optimizer)['loss'].backward()
    runner.optimizer.step()
    return runner.save_checkpoint(str(tmp_path), create_symlink=False)


def _snapshot(runner):
    return (copy.deepcopy(runner.model.state_dict()),
            copy.deepcopy(runner.optimizer.state_dict()))


def _unchanged(runner, snapshot):
    weights, optim = snapshot
    for key, value in runner.model.state_dict().items():
        assert torch.equal(value, weights[key]), key
    assert runner.optimizer.state_dict() == optim


def test_resume_of_another_depth_names_the_missing_keys_before_loading(tmp_path):
    path = _checkpoint(tmp_path, _runner(_classifier(18)))
    runner = _runner(_classifier(34))
    before = _snapshot(runner)
    with pytest.raises(CheckpointMismatch) as info:
        runner.resume(path)
    message = str(info.value)
    assert f'cannot resume from {path}' in message
    assert 'keys of the model missing from the checkpoint: backbone.layer1.2.conv1.weight' \
        in message and ' more' in message
    assert 'use load_from' in message
    _unchanged(runner, before)
    assert runner.iter == 0


def test_resume_with_another_class_count_names_both_shapes(tmp_path):
    path = _checkpoint(tmp_path, _runner(_classifier(num_classes=4)))
    runner = _runner(_classifier(num_classes=10))
    before = _snapshot(runner)
    with pytest.raises(CheckpointMismatch, match=r'2 shape mismatches: head.fc.weight \[4, 64\] '
                       r'in the checkpoint, \[10, 64\] in the model, head.fc.bias \[4\]'):
        runner.resume(path)
    _unchanged(runner, before)


@pytest.mark.parametrize('stored', [True, False])
def test_resume_with_another_optimizer_type(tmp_path, stored):
    """Named from the checkpoint's meta; for a checkpoint without it, from the param-group keys
    (torch would fail at the first step with KeyError: 'step')."""
    path = _checkpoint(tmp_path, _runner(_classifier()))
    if not stored:
        ckpt = torch.load(path, weights_only=True)
        del ckpt['meta']['optimizer_hparams']
        torch.save(ckpt, path)
    runner = _runner(_classifier(), optim='Adam')
    before = _snapshot(runner)
    expected = 'SGD in the checkpoint, Adam in this run' if stored else \
        r"param-group keys \[.*'momentum'.*\] that Adam does not have.*another optimizer type"
    with pytest.raises(CheckpointMismatch, match=expected):
        runner.resume(path)
    _unchanged(runner, before)


def test_resume_with_other_param_groups(tmp_path):
    path = _checkpoint(tmp_path, _runner(_classifier()))
    model = _classifier()
    head = list(model.head.parameters())
    rest = [p for p in model.parameters() if all(p is not h for h in head)]
    opt = torch.optim.SGD([dict(params=rest), dict(params=head, lr=0.01)], lr=0.1, momentum=0.9)
    runner = IterBasedRunner(model, optimizer=opt, logger=logging.getLogger('t'), max_iters=4)
    with pytest.raises(CheckpointMismatch, match='1 param groups in the checkpoint, 2 in this run'):
        runner.resume(path)


def test_changed_hyperparameters_on_resume_are_named_and_the_config_wins(tmp_path, caplog):
    """``optimizer.lr=0.5`` on resume: torch's load_state_dict puts back the checkpoint's lr
    (and the lr hooks' ``initial_lr``), so the change had no effect; now it does, said."""
    runner = _runner(_classifier(), lr=0.1)
    path = _checkpoint(tmp_path, runner)
    momentum_buffers = [s['momentum_buffer'].clone() for s in runner.optimizer.state.values()]
    ckpt = torch.load(path, weights_only=True)
    for group in ckpt['optimizer']['param_groups']:  # as an lr schedule leaves them
        group['initial_lr'], group['lr'] = 0.1, 0.001
    torch.save(ckpt, path)
    resumed = _runner(_classifier(), lr=0.5, momentum=0.95)
    with caplog.at_level(logging.WARNING, logger='t'):
        resumed.resume(path)
    group = resumed.optimizer.param_groups[0]
    assert group['lr'] == 0.5 and group['initial_lr'] == 0.5 and group['momentum'] == 0.95
    assert group['weight_decay'] == 1e-4
    for state, buffer in zip(resumed.optimizer.state.values(), momentum_buffers):
        assert torch.equal(state['momentum_buffer'], buffer)  # the state is the checkpoint's
    text = caplog.text
    assert f'lr 0.1 in {path}, 0.5 in the config' in text
    assert f'momentum 0.9 in {path}, 0.95 in the config' in text
    assert "The run uses the config's values" in text and 'weight_decay' not in text
    caplog.clear()
    same = _runner(_classifier(), lr=0.1)
    with caplog.at_level(logging.WARNING, logger='t'):
        same.resume(path)
    assert 'hyper-parameters differ' not in caplog.text
    assert same.optimizer.param_groups[0]['lr'] == 0.001  # the schedule's value, as saved


def test_load_from_with_another_head_warns_and_loads_the_rest(tmp_path, caplog):
    """Fine-tuning (mmdet: a COCO detector into a 3-class one): the head keeps its
    initialisation, named in a warning; everything else loads."""
    path = _checkpoint(tmp_path, _runner(_classifier(num_classes=4)))
    saved = torch.load(path, weights_only=True)['state_dict']
    runner = _runner(_classifier(num_classes=3))
    head = runner.model.head.fc.weight.detach().clone()
    with caplog.at_level(logging.WARNING, logger='t'):
        runner.load_checkpoint(path)
    assert f'checkpoint {path} does not match the model exactly: 2 shape mismatches: ' \
           'head.fc.weight [4, 64] in the checkpoint, [3, 64] in the model' in caplog.text
    assert torch.equal(runner.model.head.fc.weight, head)
    assert torch.equal(runner.model.backbone.conv1.weight, saved['backbone.conv1.weight'])


def test_load_from_an_unrelated_model_is_an_error(tmp_path):
    path = tmp_path / 'toy.pth'
    torch.save(dict(state_dict=make_model().state_dict()), path)
    runner = _runner(_classifier())
    before = _snapshot(runner)
    with pytest.raises(CheckpointMismatch, match=rf"checkpoint {path} is not a checkpoint of "
                       r"this model: only 0 of the model's \d+ tensors would load from it "
                       r'\(\d+ keys of the model missing.*; 4 keys of the checkpoint not in '
                       r'the model: fc1.weight, fc1.bias, fc2.weight, fc2.bias\)'):
        runner.load_checkpoint(str(path))
    _unchanged(runner, before)


def test_complete_load_for_testing(tmp_path):
    """Testing a trained model: another class count or a missing key fails, naming them; keys
    the model lacks (an EMA run's ``ema_*``) are only warned about."""
    path = _checkpoint(tmp_path, _runner(_classifier(num_classes=4)))
    with pytest.raises(CheckpointMismatch, match=rf'checkpoint {path} does not fit the model '
                       r'\(every tensor of the model needed\): 2 shape mismatches: '
                       r'head.fc.weight'):
        load_checkpoint(_classifier(num_classes=10), path, complete=True)
    ckpt = torch.load(path, weights_only=True)
    del ckpt['state_dict']['backbone.layer4.1.bn2.weight']
    ckpt['state_dict']['ema_head_fc_bias'] = torch.zeros(4)
    torch.save(ckpt, path)
    with pytest.raises(CheckpointMismatch, match=r'1 keys of the model missing from the '
                       r'checkpoint: backbone.layer4.1.bn2.weight$'):
        load_checkpoint(_classifier(), path, complete=True)
    ckpt['state_dict']['backbone.layer4.1.bn2.weight'] = torch.ones(64)
    torch.save(ckpt, path)
    with pytest.warns(UserWarning, match='1 keys of the checkpoint not in the model: '
                      'ema_head_fc_bias'):
        load_checkpoint(_classifier(), path, complete=True)


def test_resume_with_the_parameters_in_another_order(tmp_path):
    """Same model, same group sizes, but the optimizer lists the parameters in another order:
    the momentum buffers would land on parameters of other shapes."""
    model = make_model()
    runner = IterBasedRunner(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1,
                                                              momentum=0.9),
                             logger=logging.getLogger('t'), max_iters=4)
    model(img=torch.randn(2, 4), target=torch.zeros(2))['loss_mse'].backward()
    runner.optimizer.step()
    path = runner.save_checkpoint(str(tmp_path), create_symlink=False)
    other = make_model()
    runner = IterBasedRunner(other, optimizer=torch.optim.SGD(
        list(other.parameters())[::-1], lr=0.1, momentum=0.9), logger=logging.getLogger('t'),
        max_iters=4)
    with pytest.raises(CheckpointMismatch, match=r'optimizer: state of another shape: '
                       r'momentum_buffer of parameter 0: \[8, 4\] in the checkpoint, parameter '
                       r'\[1\]'):
        runner.resume(path)
