"""mmcv 1.x WandbLoggerHook: scalars to Weights & Biases, on mmengine's ``WandbVisBackend``."""
import os
import os.path as osp

from ....registry import HOOKS
from .base import LoggerHook

__all__ = ['WandbLoggerHook']


@HOOKS.register_module()
class WandbLoggerHook(LoggerHook):
    """Log the averaged log buffer, lr and momentum to W&B (mmcv 1.x's arguments).

    Args:
        init_kwargs (dict | None): ``wandb.init`` arguments (``project``, ``name``, ``mode``,
            ...); ``dir`` defaults to the work_dir (mmcv: the current directory).
        interval, ignore_last, reset_flag, by_epoch: see :class:`LoggerHook`.
        commit (bool): passed to ``wandb.log``.
        with_step (bool): log at ``step=<iteration>``; else add ``global_step`` to the values.
        log_artifact (bool): upload the work_dir files ending in ``out_suffix`` (logs and the
            config) as an artifact at the end of the run.
        define_metric_cfg (dict | None): ``{metric: summary}`` for ``wandb.define_metric``,
            e.g. ``{'val/mAP': 'max'}``.

    Scalars are named as mmcv does: ``train/loss``, ``val/mAP``, ``learning_rate``,
    ``momentum``. ``wandb`` is an optional dependency (``pip install 'ckptzoo[wandb]'``),
    checked when the run starts. ``WANDB_MODE=offline`` writes the run locally. Only rank 0
    logs.
    """

    def __init__(self, init_kwargs=None, interval=10, ignore_last=True, reset_flag=False,
                 commit=True, by_epoch=True, with_step=True, log_artifact=True,
                 out_suffix=('.log.json', '.log', '.py'), define_metric_cfg=None):
        super().__init__(interval, ignore_last, reset_flag, by_epoch)
        if init_kwargs is not None and not isinstance(init_kwargs, dict):
            raise TypeError(f'init_kwargs must be a dict of wandb.init arguments or None, '
                            f'got {init_kwargs!r}')
        if define_metric_cfg is not None and not isinstance(define_metric_cfg, dict):
            raise TypeError(f'define_metric_cfg must be a dict {{metric: summary}} or None, '
                            f'got {define_metric_cfg!r}')
        self.init_kwargs = init_kwargs
        self.commit = commit
        self.with_step = with_step
        self.log_artifact = log_artifact
        self.out_suffix = (out_suffix,) if isinstance(out_suffix, str) else tuple(out_suffix)
        self.define_metric_cfg = define_metric_cfg
        self.backend = None
        self.wandb = None

    @staticmethod
    def import_wandb():
        try:
            import wandb
        except ImportError as e:
            raise ImportError('WandbLoggerHook needs the wandb package: pip install '
                              f'"ckptzoo[wandb]" (or pip install wandb); the import failed '
                              f'with: {e}') from e
        return wandb

    def before_run(self, runner):
        super().before_run(runner)
        if runner.rank != 0:
            return
        self.import_wandb()
        from mmengine.visualization import WandbVisBackend
        save_dir = runner.work_dir or os.getcwd()
        self.backend = WandbVisBackend(save_dir, init_kwargs=dict(self.init_kwargs or {}),
                                       define_metric_cfg=self.define_metric_cfg,
                                       commit=self.commit)
        self.wandb = self.backend.experiment  # wandb.init happens here, at the start

    def log(self, runner):
        if self.wandb is None:
            return
        tags = self.get_loggable_tags(runner)
        if not tags:
            return
        # the backend's add_scalars drops the step: log through the wandb module it set up
        if self.with_step:
            self.wandb.log(tags, step=self.get_iter(runner), commit=self.commit)
        else:
            tags['global_step'] = self.get_iter(runner)
            self.wandb.log(tags, commit=self.commit)

    def after_run(self, runner):
        if self.wandb is None:
            return
        if self.log_artifact and runner.work_dir is not None:
            artifact = self.wandb.Artifact(name='artifacts', type='model')
            wandb_dir = osp.join(runner.work_dir, 'wandb')
            for root, dirs, files in os.walk(runner.work_dir):
                dirs[:] = [d for d in dirs if osp.join(root, d) != wandb_dir]
                for name in sorted(files):
                    if name.endswith(self.out_suffix):
                        artifact.add_file(osp.join(root, name))
            self.wandb.log_artifact(artifact)
        self.wandb.finish()
        self.wandb = self.backend = None
