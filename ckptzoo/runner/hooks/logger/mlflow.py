"""mmcv 1.x MlflowLoggerHook: scalars to MLflow, on mmengine's ``MLflowVisBackend``."""
import os
import os.path as osp
from urllib.parse import urlparse

from ....registry import HOOKS
from ...utils import unwrap_model
from .base import LoggerHook

__all__ = ['MlflowLoggerHook']


@HOOKS.register_module()
class MlflowLoggerHook(LoggerHook):
    """Log the averaged log buffer, lr and momentum to MLflow (mmcv 1.x's arguments).

    Args:
        exp_name (str | None): the experiment (created if missing; default ``Default``).
        tags (dict | None): run tags. params (dict | None): run parameters.
        log_model (bool): log the trained model with ``mlflow.pytorch`` at the end of the run;
            this needs the full ``mlflow`` package (``mlflow.pytorch`` needs pandas), which is
            checked when the run starts.
        interval, ignore_last, reset_flag, by_epoch: see :class:`LoggerHook`.
        tracking_uri (str | None): where runs go (mmengine's backend argument): a server, a
            database, or a ``file://`` folder. Default ``$MLFLOW_TRACKING_URI``, else the
            file store ``<work_dir>/mlruns``. For file stores ``MLFLOW_ALLOW_FILE_STORE`` is
            set to ``true`` (MLflow 3 otherwise refuses them).

    Scalars are named as mmcv does (``train/loss``, ``learning_rate``, ...), at step
    ``<iteration>``. ``mlflow`` is an optional dependency (``pip install 'ckptzoo[mlflow]'``
    installs ``mlflow-skinny``), checked when the run starts. Only rank 0 logs.
    """

    def __init__(self, exp_name=None, tags=None, params=None, log_model=True, interval=10,
                 ignore_last=True, reset_flag=False, by_epoch=True, tracking_uri=None):
        super().__init__(interval, ignore_last, reset_flag, by_epoch)
        for name, value in (('tags', tags), ('params', params)):
            if value is not None and not isinstance(value, dict):
                raise TypeError(f'{name} must be a dict or None, got {value!r}')
        self.exp_name = exp_name
        self.tags = tags
        self.params = params
        self.log_model = log_model
        self.tracking_uri = tracking_uri
        self.mlflow = None
        self.backend = None

    @staticmethod
    def import_mlflow():
        try:
            import mlflow
        except ImportError as e:
            raise ImportError('MlflowLoggerHook needs the mlflow package: pip install '
                              f'"ckptzoo[mlflow]" (or pip install mlflow); the import failed '
                              f'with: {e}') from e
        return mlflow

    def before_run(self, runner):
        super().before_run(runner)
        if runner.rank != 0:
            return
        self.import_mlflow()
        if self.log_model:
            try:
                import mlflow.pytorch  # noqa: F401
            except ImportError as e:
                raise ImportError(f'MlflowLoggerHook(log_model=True) needs mlflow.pytorch, '
                                  f'which failed to import ({e}): pip install mlflow (the full '
                                  'package), or set log_model=False') from e
        from mmengine.visualization import MLflowVisBackend
        uri = self.tracking_uri or os.environ.get('MLFLOW_TRACKING_URI')
        save_dir = osp.join(runner.work_dir or os.getcwd(), 'mlruns')
        parsed = urlparse(uri) if uri else None
        if uri is None or parsed.scheme in ('', 'file'):
            save_dir = save_dir if uri is None else (parsed.path if parsed.scheme else uri)
            os.environ.setdefault('MLFLOW_ALLOW_FILE_STORE', 'true')
            uri = None  # the backend makes file://<save_dir>
        self.backend = MLflowVisBackend(save_dir, exp_name=self.exp_name, tags=self.tags,
                                        params=self.params, tracking_uri=uri)
        try:
            self.mlflow = self.backend.experiment  # connects and sets up the experiment
        except Exception as e:
            raise RuntimeError(f'MlflowLoggerHook could not set up the MLflow experiment at '
                               f'{uri or "file://" + osp.abspath(save_dir)}: {e}') from e

    def log(self, runner):
        if self.mlflow is None:
            return
        tags = self.get_loggable_tags(runner)
        if tags:
            self.backend.add_scalars(tags, step=self.get_iter(runner))

    def after_run(self, runner):
        if self.mlflow is None:
            return
        if self.log_model:
            import mlflow.pytorch
            import torch
            mlflow.pytorch.log_model(unwrap_model(runner.model), 'models',
                                     pip_requirements=[f'torch=={torch.__version__}'])
        self.mlflow.end_run()
        self.mlflow = self.backend = None
