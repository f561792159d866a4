"""Optimizer hooks: accumulation equals the large batch, loss factors, FP16 loss scaling."""
import copy
import types
from types import SimpleNamespace

import pytest
import torch

from ckptzoo.runner import (EpochBasedRunner, Fp16OptimizerHook,
                            GradientCumulativeFp16OptimizerHook,
                            GradientCumulativeOptimizerHook, IterBasedRunner, OptimizerHook)

from tests.helpers.configs import build_tiny
from tests.helpers.toy import ToyDataset, flat_params, loader, make_model, quiet_logger

CLIP = dict(max_norm=0.5, norm_type=2)


def _train(runner_cls, hook, data_loader, model=None, **run_kwargs):
    model = model or make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    runner = runner_cls(model, optimizer=optimizer, logger=quiet_logger(), **run_kwargs)
    runner.register_hook(hook, priority='ABOVE_NORMAL')
    runner.run([data_loader], [('train', 1)])
    return model, runner


@pytest.mark.parametrize('fp16', [False, True])
def test_accumulation_equals_large_batch_epoch_runner(fp16):
    data = ToyDataset(18)
    ref, _ = _train(EpochBasedRunner, OptimizerHook(grad_clip=CLIP), loader(data, 3),
                    max_epochs=1)
    hook = GradientCumulativeFp16OptimizerHook(cumulative_iters=3, grad_clip=CLIP,
                                               loss_scale=512.) if fp16 else \
        GradientCumulativeOptimizerHook(cumulative_iters=3, grad_clip=CLIP)
    acc, runner = _train(EpochBasedRunner, hook, loader(data, 1), max_epochs=1)
    assert runner.iter == 18
    start = flat_params(make_model())
    moved = (flat_params(ref) - start).abs().max()
    assert moved > 1e-2  # training changed the weights: the comparison is not trivial
    tol = dict(rtol=0, atol=5e-3) if fp16 else dict(rtol=0, atol=1e-6)
    torch.testing.assert_close(flat_params(acc), flat_params(ref), **tol)


@pytest.mark.parametrize('fp16', [False, True])
def test_accumulation_with_remainder_equals_mixed_batches_iter_runner(fp16):
    data = ToyDataset(8)
    ref, _ = _train(IterBasedRunner, OptimizerHook(grad_clip=CLIP),
                    loader(data, batch_sampler=[[0, 1, 2], [3, 4, 5], [6, 7]]), max_iters=3)
    steps = []

    class Recording(GradientCumulativeFp16OptimizerHook if fp16 else
                    GradientCumulativeOptimizerHook):

        def _step(self, runner):
            steps.append((runner.iter + 1, self.loss_factor(runner)))
            super()._step(runner)

    hook = Recording(cumulative_iters=3, grad_clip=CLIP, **(dict(loss_scale=512.) if fp16
                                                             else {}))
    acc, _ = _train(IterBasedRunner, hook, loader(data, 1), max_iters=8)
    assert steps == [(3, 3), (6, 3), (8, 2)]  # the last step divides by the remainder
    tol = dict(rtol=0, atol=5e-3) if fp16 else dict(rtol=0, atol=1e-6)
    torch.testing.assert_close(flat_params(acc), flat_params(ref), **tol)


def test_backward_and_step_steps_on_demand():
    """Outside the training loop (the memory planner's probe steps) the hook steps when asked,
    with the loss divided as asked, although the runner stands at the first iteration of a
    window of 4; after_train_iter at the same position does not step."""
    batch = next(iter(loader(ToyDataset(4), 4)))
    hook = GradientCumulativeOptimizerHook(cumulative_iters=4)
    runners = []
    for model in (make_model(), make_model()):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        runners.append(SimpleNamespace(model=model, optimizer=optimizer, iter=0, max_iters=8,
                                       outputs=model.train_step(batch, optimizer)))
    asked, ref = runners
    hook.backward_and_step(asked, loss_factor=4, step=True)
    (ref.outputs['loss'] / 4).backward()
    ref.optimizer.step()
    assert torch.equal(flat_params(asked.model), flat_params(ref.model))
    assert not torch.equal(flat_params(asked.model), flat_params(make_model()))
    assert all(p.grad is None for p in asked.model.parameters())  # zeroed by the step
    asked.outputs = asked.model.train_step(batch, asked.optimizer)
    before = flat_params(asked.model)
    hook.after_train_iter(asked)
    assert torch.equal(flat_params(asked.model), before)


@pytest.mark.parametrize('max_iters,start,expected', [
    (6, 0, [3] * 6), (7, 0, [3] * 6 + [1]), (8, 0, [3] * 6 + [2, 2]), (10, 0, [3] * 9 + [1]),
    (10, 5, [3] * 4 + [1]), (6, 3, [3] * 3), (8, 3, [3] * 3 + [2, 2])])
def test_loss_factors(max_iters, start, expected):
    hook = GradientCumulativeOptimizerHook(cumulative_iters=3)
    factors = [hook.loss_factor(SimpleNamespace(iter=i, max_iters=max_iters))
               for i in range(start, max_iters)]
    assert factors == expected


@pytest.mark.parametrize('value', [0, -1, '3', 2.0, True, None])
def test_bad_cumulative_iters(value):
    with pytest.raises(ValueError, match=f'cumulative_iters must be a positive int, got '
                       f'{value!r}'.replace('(', r'\(')):
        GradientCumulativeOptimizerHook(cumulative_iters=value)


@pytest.mark.parametrize('value', [512, 'static', -1.0, [512.], dict(mode='static'),
                                   dict(init_scal=2.)])
def test_bad_loss_scale(value):
    with pytest.raises(ValueError, match='loss_scale'):
        Fp16OptimizerHook(loss_scale=value)
    with pytest.raises(ValueError, match=r"loss_scale must be a float, 'dynamic' or a dict, "
                       r'got 512$'):
        Fp16OptimizerHook(loss_scale=512)


def test_static_scale_never_changes():
    data = ToyDataset(18)
    hook = Fp16OptimizerHook(loss_scale=512.)
    model, runner = _train(IterBasedRunner, hook, loader(data, 1), max_iters=40)
    assert hook.loss_scaler.get_scale() == 512.
    assert runner.meta['fp16']['loss_scaler']['scale'] == 512.
    assert runner.log_buffer.val_history['loss_scale'] == [512.] * 40


class _InfAt(Fp16OptimizerHook):
    """Makes the gradient of fc1.weight inf after the backward of iteration ``at``."""

    def __init__(self, at, **kwargs):
        super().__init__(**kwargs)
        self.at = at
        self.snapshots = {}

    def _step(self, runner):
        if runner.iter == self.at:
            runner.model.fc1.weight.grad[0, 0] = float('inf')
            self.snapshots['before'] = copy.deepcopy(runner.model.state_dict())
            self.snapshots['scale_before'] = self.loss_scaler.get_scale()
        super()._step(runner)
        if runner.iter == self.at:
            self.snapshots['after'] = copy.deepcopy(runner.model.state_dict())
            self.snapshots['scale_after'] = self.loss_scaler.get_scale()


@pytest.mark.parametrize('loss_scale,dynamic', [('dynamic', True), (512., False),
                                                (dict(init_scale=1024.), True)])
def test_inf_gradient_skips_step(loss_scale, dynamic):
    hook = _InfAt(2, loss_scale=loss_scale, grad_clip=CLIP)
    _train(IterBasedRunner, hook, loader(ToyDataset(8), 1), max_iters=4)
    for key, value in hook.snapshots['before'].items():
        torch.testing.assert_close(hook.snapshots['after'][key], value, rtol=0, atol=0)
    if dynamic:  # halved by the overflow
        assert hook.snapshots['scale_after'] == hook.snapshots['scale_before'] / 2
    else:
        assert hook.snapshots['scale_before'] == hook.snapshots['scale_after'] == 512.


def test_clipping_acts_on_unscaled_gradients():
    data = ToyDataset(8)
    _, fp32 = _train(IterBasedRunner, OptimizerHook(grad_clip=CLIP), loader(data, 2),
                     max_iters=4)
    _, fp16 = _train(IterBasedRunner, Fp16OptimizerHook(grad_clip=CLIP, loss_scale=512.),
                     loader(data, 2), max_iters=4)
    norms32 = fp32.log_buffer.val_history['grad_norm']
    norms16 = fp16.log_buffer.val_history['grad_norm']
    assert len(norms16) == 4 and min(norms32) > 0.05
    # the scaled gradients would be 512 times larger
    torch.testing.assert_close(torch.tensor(norms16), torch.tensor(norms32), rtol=2e-2, atol=0)


def test_bfloat16_needs_no_scaler():
    hook = Fp16OptimizerHook(dtype='bfloat16')
    model, runner = _train(IterBasedRunner, hook, loader(ToyDataset(8), 2), max_iters=3)
    assert hook.loss_scaler is None and model.fp16_dtype == torch.bfloat16
    with pytest.raises(ValueError, match='bfloat16 needs no loss scaling'):
        Fp16OptimizerHook(dtype='bfloat16', loss_scale=512.)
    with pytest.raises(ValueError, match="fp16 dtype must be one of .*got 'int8'"):
        Fp16OptimizerHook(dtype='int8')


def test_accumulation_warns_about_batchnorm():
    model = make_model()
    model.bn = torch.nn.BatchNorm1d(4)
    with pytest.warns(UserWarning, match=r'BatchNorm layers in training mode \(bn\)'):
        _train(IterBasedRunner, GradientCumulativeOptimizerHook(cumulative_iters=2),
               loader(ToyDataset(4), 1), model=model, max_iters=2)


def test_accumulation_does_not_warn_about_batchnorm_the_model_keeps_in_eval(recwarn):
    """norm_eval: the model's own train() leaves its BatchNorm in eval mode, so it sees no
    batch statistics and accumulation is exact for it: no warning (checked once the runner
    has put the model in training mode, not on the model as built)."""
    model = make_model()
    model.bn = torch.nn.BatchNorm1d(4)
    plain_train = type(model).train

    def train(self, mode=True):
        plain_train(self, mode)
        self.bn.eval()
        return self
    model.train = types.MethodType(train, model)
    _train(IterBasedRunner, GradientCumulativeOptimizerHook(cumulative_iters=2),
           loader(ToyDataset(4), 1), model=model, max_iters=2)
    assert not [w for w in recwarn if 'BatchNorm layers in training' in str(w.message)]


def _accumulating_run(work_dir, k, resume=None):
    from ckptzoo.runner import CheckpointHook
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    runner = IterBasedRunner(model, optimizer=optimizer, work_dir=str(work_dir),
                             logger=quiet_logger(), max_iters=8)
    runner.register_hook(GradientCumulativeOptimizerHook(cumulative_iters=k),
                         priority='ABOVE_NORMAL')
    runner.register_hook(CheckpointHook(interval=3, by_epoch=False))
    if resume:
        runner.resume(resume)
    runner.run([loader(ToyDataset(8))], [('train', 1)])
    return model


def test_resume_inside_a_window_of_another_size_drops_the_gradients(tmp_path, recwarn):
    """Saved after 3 iterations with cumulative_iters=2 (one iteration's gradients, loss / 2):
    resumed with 3 they would be a third of a window of 3 each; they are dropped with a
    warning naming both windows and the checkpoint. Resumed with 2: bit-identical."""
    reference = _accumulating_run(tmp_path / 'a', 2)
    ckpt = tmp_path / 'a' / 'iter_3.pth'
    saved = torch.load(ckpt, weights_only=True)
    assert saved['accumulation'] == dict(cumulative_iters=2, loss_divisor=2)
    assert 'accumulated_grads' in saved
    with pytest.warns(UserWarning) as record:
        _accumulating_run(tmp_path / 'b', 3, resume=str(ckpt))
    messages = [str(w.message) for w in record]
    assert any(f'{ckpt} holds gradients accumulated with cumulative_iters=2 (loss divided by '
               f'2); this run has cumulative_iters=3 (loss divided by 3) at iteration 3: they '
               f'are dropped' in m for m in messages), messages
    recwarn.clear()
    resumed = _accumulating_run(tmp_path / 'c', 2, resume=str(ckpt))
    assert not [w for w in recwarn if 'accumulat' in str(w.message)]
    assert torch.equal(flat_params(resumed), flat_params(reference))
    # a checkpoint written before the window was stored resumes as it did
    del saved['accumulation']
    torch.save(saved, tmp_path / 'old.pth')
    resumed = _accumulating_run(tmp_path / 'd', 2, resume=str(tmp_path / 'old.pth'))
    assert torch.equal(flat_params(resumed), flat_params(reference))


@pytest.mark.cuda
@pytest.mark.parametrize('fp16', [dict(loss_scale='dynamic'), dict(loss_scale=512.),
                                  dict(dtype='bfloat16')])
def test_mixed_precision_on_cuda_follows_the_float32_run(tmp_path, fp16):
    """The config's ``fp16`` on the GPU: autocast in the forward, the scaler (or none for
    bf16), four SGD steps of the tiny classifier close to the float32 run's."""
    params = {}
    for name, extra in (('fp32', {}), ('mixed', dict(fp16=fp16))):
        cfg, run = build_tiny(tmp_path / name, device='cuda', **extra)
        dtypes = []
        run.model.backbone.conv1.register_forward_hook(
            lambda m, args, out: dtypes.append(out.dtype))
        run.runner.run(run.data_loaders, run.workflow)
        assert run.runner.iter == 4
        params[name] = torch.cat([p.detach().flatten().float().cpu()
                                  for p in run.model.parameters()])
        expected = {'fp32': torch.float32, 'mixed': {None: torch.float16}.get(
            fp16.get('dtype'), torch.bfloat16)}[name]
        assert set(dtypes) == {expected}
    start = torch.cat([p.detach().flatten().cpu() for p in build_tiny(tmp_path / 'init')[1]
                       .model.parameters()])
    moved = (params['fp32'] - start).abs().max()
    assert moved > 1e-3
    # bf16 keeps 8 bits of mantissa: after 4 steps about a fifth of the movement differs
    assert (params['mixed'] - params['fp32']).abs().max() < 0.5 * moved
