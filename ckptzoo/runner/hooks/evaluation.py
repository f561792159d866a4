"""mmcv 1.x EvalHook / DistEvalHook: evaluate during training and keep the best checkpoint."""
import inspect
import math
import os
import os.path as osp
import warnings

import torch.distributed as dist
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.data import DataLoader

from ...registry import HOOKS, check_keys
from ..test import multi_gpu_test, single_gpu_test
from ..work_dir import in_directory
from .checkpoint import check_local_file_client, out_dir_for
from .hook import Hook
from .logger import LoggerHook

__all__ = ['EvalHook', 'DistEvalHook', 'check_eval_kwargs']


def _evaluated(dataset):
    """The datasets whose ``evaluate`` takes the keys: those inside a ConcatDataset (its
    ``evaluate`` passes ``**kwargs`` on), else ``dataset`` itself."""
    evaluate = getattr(dataset, 'evaluate', None)
    inner = getattr(dataset, 'datasets', None)
    if evaluate is None or not _takes_any_key(evaluate) or inner is None \
            or inspect.isclass(dataset):
        return [dataset]
    return [leaf for d in inner for leaf in _evaluated(d)]


def _takes_any_key(fn):
    return any(p.kind == p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())


def check_eval_kwargs(dataset, eval_kwargs, hook_args=(), where='evaluation'):
    """``evaluation``'s keys that are not the hook's go to ``dataset.evaluate`` (a dataset or a
    dataset class): check them against its signature, and ``metric`` against the dataset's
    ``METRICS``, so that a typo or a metric of another task (``metric='bbox'`` for a
    classifier) fails before training instead of at the first evaluation, an epoch later.
    ``hook_args`` are the hook's own arguments, offered as close matches."""
    for leaf in _evaluated(dataset):
        name = leaf.__name__ if inspect.isclass(leaf) else type(leaf).__name__
        evaluate = getattr(leaf, 'evaluate', None)
        if evaluate is None:
            raise TypeError(f'the validation dataset {name} has no evaluate(results, ...): '
                            'it cannot be evaluated during training (use --no-validate)')
        if not _takes_any_key(evaluate):
            params = [p for p in inspect.signature(evaluate).parameters
                      if p not in ('self', 'results', 'logger')]
            check_keys(eval_kwargs, list(params) + list(hook_args), where,
                       owner=f'the evaluation hook and {name}.evaluate')
        metrics = getattr(leaf, 'METRICS', None)
        metric = eval_kwargs.get('metric')
        if metrics is None or metric is None:
            continue
        given = [metric] if isinstance(metric, str) else metric
        if not isinstance(given, (list, tuple)) or not all(m in metrics for m in given):
            raise ValueError(f'{where}.metric {metric!r} is not a metric of {name}: allowed '
                             f'{", ".join(map(repr, metrics))}')


def _check_dynamic_intervals(pairs):
    """mmdet's ``dynamic_intervals``: ``(milestone, interval)`` pairs of positive ints,
    milestones increasing."""
    if pairs is None:
        return None
    ok = isinstance(pairs, (list, tuple)) and all(
        isinstance(p, (list, tuple)) and len(p) == 2 and
        all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in p)
        for p in pairs)
    if not ok or any(a[0] >= b[0] for a, b in zip(pairs, pairs[1:])):
        raise ValueError(f'dynamic_intervals must be a list of (milestone, interval) pairs of '
                         f'positive ints with increasing milestones, got {pairs!r}')
    return [tuple(p) for p in pairs]


@HOOKS.register_module()
class EvalHook(Hook):
    """Evaluate the model every ``interval`` epochs/iterations.

    The results of ``dataloader.dataset.evaluate(results, logger=runner.logger, **eval_kwargs)``
    go into ``runner.log_buffer.output`` (``ready`` set) so the logger hooks print them.

    Args:
        dataloader (DataLoader): the evaluation data.
        start (int | None): the first epoch/iteration to evaluate at (then every ``interval``
            after it); when it is <= the resumed epoch/iteration, also evaluate before training.
        interval (int): evaluate every this many epochs (``by_epoch``) or iterations.
        by_epoch (bool): count epochs, else iterations.
        save_best (str | None): the result key whose best value keeps a checkpoint
            ``best_<key>_epoch_<n>.pth`` (``_iter_<n>``); 'auto' takes the first key of the
            results. The previous best checkpoint is removed when it is in this run's
            ``out_dir``.
        rule (str | None): 'greater' or 'less'; None infers it from the key ('mAP', 'AP', 'acc',
            'top', ... are greater, 'loss' is less).
        test_fn (callable | None): ``test_fn(model, dataloader) -> results``; default
            :func:`ckptzoo.runner.test.single_gpu_test`.
        greater_keys, less_keys (str | list[str] | None): replace the keys used to infer the rule.
        out_dir (str | None): where the best checkpoint goes; default the work_dir, another
            directory gets the work_dir's basename appended as mmcv.
        dynamic_intervals (list[tuple[int, int]] | None): mmdet 2.x's: ``[(milestone,
            interval), ...]``, from epoch/iteration ``milestone`` on (counting from 1)
            evaluate every ``interval`` (YOLOX: every epoch of the last ones). Computed from
            the runner's position, so it also holds after a resume.
        **eval_kwargs: passed to ``dataset.evaluate`` (``metric='mAP'``, ...); checked
            here against its signature and the dataset's ``METRICS``
            (:func:`check_eval_kwargs`).

    Fixes over mmcv: a best score of exactly 0 is still saved (mmcv tested ``if key_score``);
    the model's train mode is restored after an evaluation in the middle of an epoch; a best
    checkpoint recorded in a resumed checkpoint but outside this run's ``out_dir`` (another
    run's, resumed with ``--resume-from``, or the original of a copied work dir) is never
    deleted (mmcv deleted it at the next best score). Its score still carries over, as in mmcv:
    only a better score writes a new best checkpoint, in this run's ``out_dir``.
    """

    rule_map = {'greater': lambda x, y: x > y, 'less': lambda x, y: x < y}
    init_value_map = {'greater': -math.inf, 'less': math.inf}
    _default_greater_keys = ['acc', 'top', 'AR@', 'auc', 'precision', 'mAP', 'AP', 'mDice',
                             'mIoU', 'mAcc', 'aAcc']
    _default_less_keys = ['loss']

    def __init__(self, dataloader, start=None, interval=1, by_epoch=True, save_best=None,
                 rule=None, test_fn=None, greater_keys=None, less_keys=None, out_dir=None,
                 file_client_args=None, dynamic_intervals=None, **eval_kwargs):
        self.dynamic_intervals = _check_dynamic_intervals(dynamic_intervals)
        if not isinstance(dataloader, DataLoader):
            raise TypeError(f'dataloader must be a torch DataLoader, got {type(dataloader)}')
        if not isinstance(interval, int) or isinstance(interval, bool) or interval <= 0:
            raise ValueError(f'interval must be a positive int, got {interval!r}')
        if not isinstance(by_epoch, bool):
            raise TypeError(f'by_epoch must be a bool, got {by_epoch!r}')
        if start is not None and (not isinstance(start, int) or start < 0):
            raise ValueError(f'start must be None or a non-negative int, got {start!r}')
        if save_best is not None and not isinstance(save_best, str):
            raise TypeError(f'save_best must be a str (a result key or "auto") or None, '
                            f'got {save_best!r}')
        check_local_file_client(file_client_args, type(self).__name__)
        self.dataloader = dataloader
        self.interval = interval
        self.start = start
        self.by_epoch = by_epoch
        self.save_best = save_best
        self.eval_kwargs = eval_kwargs
        self.initial_flag = True

        if test_fn is None:
            test_fn = single_gpu_test
        self.test_fn = test_fn

        self.greater_keys = self._key_list(greater_keys, self._default_greater_keys,
                                           'greater_keys')
        self.less_keys = self._key_list(less_keys, self._default_less_keys, 'less_keys')

        if self.save_best is not None:
            self.best_ckpt_path = None
            self._init_rule(rule, self.save_best)
        elif rule is not None and rule not in self.rule_map:
            raise KeyError(f'rule must be "greater", "less" or None, got {rule!r}')
        self.out_dir = out_dir
        self.file_client_args = file_client_args
        own = [p for p in inspect.signature(type(self)).parameters
               if p not in ('dataloader', 'eval_kwargs')]
        check_eval_kwargs(dataloader.dataset, eval_kwargs, own)

    @staticmethod
    def _key_list(keys, default, name):
        if keys is None:
            return list(default)
        if isinstance(keys, str):
            keys = (keys,)
        if not all(isinstance(k, str) for k in keys):
            raise TypeError(f'{name} must be a str or a list of str, got {keys!r}')
        return list(keys)

    def _init_rule(self, rule, key_indicator):
        if rule is not None and rule not in self.rule_map:
            raise KeyError(f'rule must be "greater", "less" or None, got {rule!r}')
        if rule is None and key_indicator != 'auto':
            key_lc = key_indicator.lower()
            greater = [k.lower() for k in self.greater_keys]
            less = [k.lower() for k in self.less_keys]
            if key_lc in greater:
                rule = 'greater'
            elif key_lc in less:
                rule = 'less'
            elif any(k in key_lc for k in greater):
                rule = 'greater'
            elif any(k in key_lc for k in less):
                rule = 'less'
            else:
                raise ValueError(f'cannot infer the rule for key {key_indicator!r} (greater '
                                 f'keys: {self.greater_keys}, less keys: {self.less_keys}): '
                                 f'give rule="greater" or rule="less"')
        self.rule = rule
        self.key_indicator = key_indicator
        if self.rule is not None:
            self.compare_func = self.rule_map[self.rule]

    def before_run(self, runner):
        self.out_dir = out_dir_for(self.out_dir, runner.work_dir)
        if self.save_best is not None:
            if runner.meta is None:
                warnings.warn('runner.meta is None; creating an empty one for hook_msgs')
                runner.meta = dict()
            runner.meta.setdefault('hook_msgs', dict())
            self.best_ckpt_path = self._own_best(runner, runner.meta['hook_msgs'])

    def _own_best(self, runner, hook_msgs):
        """The recorded best checkpoint if this run may replace it (it is in ``out_dir``)."""
        best = hook_msgs.get('best_ckpt')
        if not best or in_directory(best, self.out_dir):
            return best
        runner.logger.info(
            f'The best checkpoint recorded in the resumed checkpoint, {best}, is not in this '
            f"run's out_dir {self.out_dir}: it is left in place; a score better than "
            f"{hook_msgs.get('best_score')} saves a new best checkpoint in {self.out_dir}")
        return None

    def before_train_iter(self, runner):
        """Evaluate before training when resuming at or past ``start`` (iteration-based)."""
        if self.by_epoch or not self.initial_flag:
            return
        if self.start is not None and runner.iter >= self.start:
            self.after_train_iter(runner)
        self.initial_flag = False

    def before_train_epoch(self, runner):
        """Evaluate before training when resuming at or past ``start`` (epoch-based)."""
        if not (self.by_epoch and self.initial_flag):
            return
        if self.start is not None and runner.epoch >= self.start:
            self.after_train_epoch(runner)
        self.initial_flag = False

    def after_train_iter(self, runner):
        if not self.by_epoch and self._should_evaluate(runner):
            # this hook runs before the logger hooks: print this iteration's training log
            # first, so the training and evaluation values are not mixed in one line
            for hook in runner.hooks:
                if isinstance(hook, LoggerHook):
                    hook.after_train_iter(runner)
            runner.log_buffer.clear()
            self._do_evaluate(runner)

    def after_train_epoch(self, runner):
        if self.by_epoch and self._should_evaluate(runner):
            self._do_evaluate(runner)

    def _do_evaluate(self, runner):
        results = self.test_fn(runner.model, self.dataloader)
        runner.log_buffer.output['eval_iter_num'] = len(self.dataloader)
        key_score = self.evaluate(runner, results)
        if self.save_best and key_score is not None:
            self._save_ckpt(runner, key_score)

    def _should_evaluate(self, runner):
        if self.by_epoch:
            current, check_time = runner.epoch, self.every_n_epochs
        else:
            current, check_time = runner.iter, self.every_n_iters
        interval = self.interval
        for milestone, later in self.dynamic_intervals or ():
            if current + 1 >= milestone:
                interval = later
        if self.start is None:
            return check_time(runner, interval)
        if current + 1 < self.start:
            return False
        return (current + 1 - self.start) % interval == 0

    def _save_ckpt(self, runner, key_score):
        if self.by_epoch:
            current, cur_type, cur_time = f'epoch_{runner.epoch + 1}', 'epoch', runner.epoch + 1
        else:
            current, cur_type, cur_time = f'iter_{runner.iter + 1}', 'iter', runner.iter + 1
        best_score = runner.meta['hook_msgs'].get('best_score', self.init_value_map[self.rule])
        if not self.compare_func(key_score, best_score):
            return
        runner.meta['hook_msgs']['best_score'] = key_score
        if self.best_ckpt_path and osp.isfile(self.best_ckpt_path) \
                and in_directory(self.best_ckpt_path, self.out_dir):
            os.remove(self.best_ckpt_path)
            runner.logger.info(f'The previous best checkpoint {self.best_ckpt_path} was removed')
        best_ckpt_name = f'best_{self.key_indicator}_{current}.pth'
        self.best_ckpt_path = osp.join(self.out_dir, best_ckpt_name)
        runner.meta['hook_msgs']['best_ckpt'] = self.best_ckpt_path
        runner.save_checkpoint(self.out_dir, filename_tmpl=best_ckpt_name, create_symlink=False)
        runner.logger.info(f'Now best checkpoint is saved as {best_ckpt_name}.')
        runner.logger.info(f'Best {self.key_indicator} is {key_score:0.4f} '
                           f'at {cur_time} {cur_type}.')

    def evaluate(self, runner, results):
        """Evaluate, put the results into the log buffer; return the ``save_best`` score."""
        eval_res = self.dataloader.dataset.evaluate(results, logger=runner.logger,
                                                    **self.eval_kwargs)
        for name, val in eval_res.items():
            runner.log_buffer.output[name] = val
        runner.log_buffer.ready = True

        if self.save_best is None:
            return None
        if not eval_res:
            warnings.warn('the evaluation results are empty: the best checkpoint is not '
                          'updated this time')
            return None
        if self.key_indicator == 'auto':
            self._init_rule(self.rule, next(iter(eval_res)))
        if self.key_indicator not in eval_res:
            raise KeyError(f'save_best key {self.key_indicator!r} is not in the evaluation '
                           f'results, which have {sorted(eval_res)}')
        return eval_res[self.key_indicator]


@HOOKS.register_module()
class DistEvalHook(EvalHook):
    """:class:`EvalHook` for distributed training: every rank tests its share of the data,
    rank 0 evaluates, logs and saves the best checkpoint.

    Args:
        broadcast_bn_buffer (bool): copy rank 0's BatchNorm running statistics to the other
            ranks before testing (DDP does not synchronise them).
        tmpdir, gpu_collect: passed to ``test_fn`` (mmcv's signature; the default
            :func:`ckptzoo.runner.test.multi_gpu_test` gathers with ``all_gather_object``).
        Others as :class:`EvalHook`; ``test_fn`` defaults to ``multi_gpu_test``.
    """

    def __init__(self, dataloader, start=None, interval=1, by_epoch=True, save_best=None,
                 rule=None, test_fn=None, greater_keys=None, less_keys=None,
                 broadcast_bn_buffer=True, tmpdir=None, gpu_collect=False, out_dir=None,
                 file_client_args=None, dynamic_intervals=None, **eval_kwargs):
        if test_fn is None:
            test_fn = multi_gpu_test
        super().__init__(dataloader, start=start, interval=interval, by_epoch=by_epoch,
                         save_best=save_best, rule=rule, test_fn=test_fn,
                         greater_keys=greater_keys, less_keys=less_keys, out_dir=out_dir,
                         dynamic_intervals=dynamic_intervals,
                         file_client_args=file_client_args, **eval_kwargs)
        self.broadcast_bn_buffer = broadcast_bn_buffer
        self.tmpdir = tmpdir
        self.gpu_collect = gpu_collect

    def _do_evaluate(self, runner):
        distributed = dist.is_available() and dist.is_initialized()
        if self.broadcast_bn_buffer and distributed:
            for module in runner.model.modules():
                if isinstance(module, _BatchNorm) and module.track_running_stats:
                    dist.broadcast(module.running_var, 0)
                    dist.broadcast(module.running_mean, 0)
        tmpdir = self.tmpdir
        if tmpdir is None:
            tmpdir = osp.join(runner.work_dir, '.eval_hook')
        results = self.test_fn(runner.model, self.dataloader, tmpdir=tmpdir,
                               gpu_collect=self.gpu_collect)
        if runner.rank == 0:
            runner.log_buffer.output['eval_iter_num'] = len(self.dataloader)
            key_score = self.evaluate(runner, results)
            if self.save_best and key_score is not None:
                self._save_ckpt(runner, key_score)
