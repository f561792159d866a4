"""The Hook base class of mmcv 1.x: the runner calls these at each stage of training."""
from ...registry import HOOKS


@HOOKS.register_module()
class Hook:
    stages = ('before_run', 'before_train_epoch', 'before_train_iter', 'after_train_iter',
              'after_train_epoch', 'before_val_epoch', 'before_val_iter', 'after_val_iter',
              'after_val_epoch', 'after_run')

    def before_run(self, runner):
        pass

    def after_run(self, runner):
        pass

    def before_epoch(self, runner):
        pass

    def after_epoch(self, runner):
        pass

    def before_iter(self, runner):
        pass

    def after_iter(self, runner):
        pass

    def before_train_epoch(self, runner):
        self.before_epoch(runner)

    def before_val_epoch(self, runner):
        self.before_epoch(runner)

    def after_train_epoch(self, runner):
        self.after_epoch(runner)

    def after_val_epoch(self, runner):
        self.after_epoch(runner)

    def before_train_iter(self, runner):
        self.before_iter(runner)

    def before_val_iter(self, runner):
        self.before_iter(runner)

    def after_train_iter(self, runner):
        self.after_iter(runner)

    def after_val_iter(self, runner):
        self.after_iter(runner)

    # mmengine's stages: add to a checkpoint being saved / read back what was added
    def before_save_checkpoint(self, runner, checkpoint):
        pass

    def after_load_checkpoint(self, runner, checkpoint):
        pass

    # ``runner.iter`` / ``runner.epoch`` count completed steps before the increment, as in mmcv
    def every_n_epochs(self, runner, n):
        return (runner.epoch + 1) % n == 0 if n > 0 else False

    def every_n_inner_iters(self, runner, n):
        return (runner.inner_iter + 1) % n == 0 if n > 0 else False

    def every_n_iters(self, runner, n):
        return (runner.iter + 1) % n == 0 if n > 0 else False

    def end_of_epoch(self, runner):
        return runner.inner_iter + 1 == len(runner.data_loader)

    def is_last_epoch(self, runner):
        return runner.epoch + 1 == runner._max_epochs

    def is_last_iter(self, runner):
        return runner.iter + 1 == runner._max_iters

    def get_triggered_stages(self):
        trigger = {
            'before_epoch': ['before_train_epoch', 'before_val_epoch'],
            'after_epoch': ['after_train_epoch', 'after_val_epoch'],
            'before_iter': ['before_train_iter', 'before_val_iter'],
            'after_iter': ['after_train_iter', 'after_val_iter'],
        }
        stages = set()
        for stage in list(self.stages) + list(trigger):
            if getattr(type(self), stage) is not getattr(Hook, stage):
                stages.update(trigger.get(stage, [stage]))
        return [s for s in self.stages if s in stages]
