"""mmdet 2.x's NumClassCheckHook: the head's num_classes must match the dataset's CLASSES."""
from ...registry import HOOKS
from ..utils import unwrap_model
from .hook import Hook


@HOOKS.register_module()
class NumClassCheckHook(Hook):
    """Fails before training, not after an epoch, when a config's classes do not match.

    A module whose ``num_classes`` is not the dataset's by design (an RPN head scores object
    against background: mmdet skips ``RPNHead``) says so with ``CHECK_NUM_CLASSES = False``."""

    def _check(self, runner):
        dataset = getattr(runner.data_loader, 'dataset', None)
        classes = getattr(dataset, 'CLASSES', None)
        if classes is None:
            return
        if isinstance(classes, str):
            raise TypeError(f'dataset CLASSES must be a tuple of class names, got the string '
                            f'{classes!r}; add a comma for one class: ({classes!r}, )')
        model = unwrap_model(runner.model)
        for name, module in model.named_modules():
            num_classes = getattr(module, 'num_classes', None)
            if isinstance(num_classes, int) and module is not model \
                    and getattr(module, 'CHECK_NUM_CLASSES', True) \
                    and num_classes != len(classes):
                raise ValueError(f'{name}.num_classes = {num_classes} does not match the '
                                 f'{len(classes)} CLASSES of {type(dataset).__name__}: '
                                 f'{classes}')

    def before_train_epoch(self, runner):
        self._check(runner)

    def before_val_epoch(self, runner):
        self._check(runner)
