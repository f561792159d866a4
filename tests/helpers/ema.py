"""Training runs with an EMA hook on the toy regressor."""
import torch

from ckptzoo.runner import CheckpointHook

from tests.helpers.toy import ToyDataset, loader, make_model, quiet_logger


def run_ema(runner_cls, opt_hook, ema_hook, data=None, work_dir=None, resume=None, extra=(),
            **runner_kwargs):
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    recorder = Recorder(model, optimizer)
    runner = runner_cls(model, optimizer=optimizer, logger=quiet_logger(), work_dir=work_dir,
                        **runner_kwargs)
    runner.register_hook(opt_hook, priority='ABOVE_NORMAL')
    runner.register_hook(ema_hook, priority=49)
    for hook, priority in extra:
        runner.register_hook(hook, priority=priority)
    if resume is not None:
        runner.resume(resume)
    runner.run([loader(data or ToyDataset(8), 1)], [('train', 1)])
    return model, runner, recorder


def ema_checkpoint_hook():
    return CheckpointHook(interval=1, by_epoch=False, max_keep_ckpts=-1)


class Recorder:
    """The weights after every optimizer step (the reference the average is computed from)."""

    def __init__(self, model, optimizer):
        self.model = model
        self.initial = self.snapshot()
        self.steps = []
        optimizer.register_step_post_hook(lambda *a: self.steps.append(self.snapshot()))

    def snapshot(self):
        return {n: p.detach().clone() for n, p in self.model.named_parameters()}
