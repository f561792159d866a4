"""mmdet 2.x ``SetEpochInfoHook``: tells the model the epoch before each training epoch
(``model.set_epoch(runner.epoch)``), for heads whose training changes with it (TOOD switches
from its initial ATSS assignment to the task-aligned one at ``initial_epoch``)."""
from ...registry import HOOKS
from ...utils.model_wrapper import unwrap_model
from .hook import Hook

__all__ = ['SetEpochInfoHook']


@HOOKS.register_module()
class SetEpochInfoHook(Hook):
    """Calls ``set_epoch(runner.epoch)`` on the (unwrapped) model before each train epoch."""

    def before_train_epoch(self, runner):
        model = unwrap_model(runner.model)
        if not hasattr(model, 'set_epoch'):
            raise AttributeError(f'SetEpochInfoHook needs a model with set_epoch(epoch) (e.g. '
                                 f'TOOD), got {type(model).__name__}')
        model.set_epoch(runner.epoch)
