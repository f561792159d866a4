"""mmcv 1.7's RFSearchHook (RF-Next, https://arxiv.org/abs/2206.06637): search each
convolution's dilation rate while training, or train with the rates a search found.

The model is prepared once, before its optimizer is built (:func:`rfnext_init_model`, called
by :func:`ckptzoo.apis.build_train_model`, ``tools/test.py`` and ``init_detector`` as mmdet
2.28's tools call theirs); the hook the runner registers from ``custom_hooks`` then moves the
rates in ``'search'`` mode and writes ``local_search_config_step{n}.json`` to the work dir.
Layer names in that file are ``module.<name in the model>``, as mmcv writes them from its
``MMDataParallel``-wrapped model, so files from mmcv and from here are interchangeable.

Fixed over mmcv: a resumed search continues where it stood (the step and every op's rates are
saved in the checkpoint's ``meta['rfsearch']``; mmcv restarts at the config's step with the
initial rates under weights trained at others); under DDP one rank writes the JSON.
"""
from __future__ import annotations

import copy
import json
import logging
import os
import os.path as osp
from collections.abc import Mapping
from typing import Any

import torch.nn as nn

from ...ops.conv_rfsearch import BaseConvRFSearchOp, Conv2dRFSearchOp, get_single_padding
from ...registry import HOOKS, unscoped
from ..dist_utils import get_dist_info
from ..utils import unwrap_model
from .hook import Hook

__all__ = ['RFSearchHook', 'rfnext_init_model']

logger = logging.getLogger('ckptzoo')

MODES = ('search', 'fixed_single_branch', 'fixed_multi_branch')
SEARCH_KEYS = ('step', 'max_step', 'search_interval', 'exp_rate', 'init_alphas', 'mmin', 'mmax',
               'num_branches', 'skip_layer')


def _plain(value):
    """A config (mmengine ConfigDict, tuples) as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _searchable(module: nn.Module) -> bool:
    """A Conv2d with an odd kernel larger than 1 along at least one axis (mmcv's rule)."""
    if not isinstance(module, nn.Conv2d):
        return False
    return any(k > 1 and k % 2 for k in module.kernel_size)


def load_rfstructure(path: str) -> dict:
    """The ``structure`` of a searched-structure JSON (``local_search_config_step{n}.json``);
    a missing file fails naming it and saying how one is made."""
    if not osp.isfile(path):
        raise FileNotFoundError(
            f'rfstructure_file {path!r} does not exist (relative paths are from the current '
            f'directory {os.getcwd()!r}). The fixed RF-Next modes train with the structure a '
            "search found: first train the config's search variant (RFSearchHook "
            "mode='search'), which writes local_search_config_step{n}.json to its work dir, "
            'then set rfstructure_file to that file (e.g. --cfg-options '
            'custom_hooks.0.rfstructure_file=work_dirs/.../local_search_config_step11.json)')
    with open(path, encoding='utf-8') as f:
        content = json.load(f)
    if not isinstance(content, dict) or not isinstance(content.get('structure'), dict):
        raise ValueError(f'rfstructure_file {path!r} has no "structure" dict (a '
                         'local_search_config_step{n}.json written by the search mode has one)')
    return content['structure']


@HOOKS.register_module()
class RFSearchHook(Hook):
    """Receptive-field search via dilation rates (mmcv 1.7's name, arguments and files).

    Args:
        mode (str): ``'search'`` (every eligible conv becomes a :class:`Conv2dRFSearchOp`
            whose rates move every ``search_interval`` epochs / iterations until
            ``max_step``), ``'fixed_single_branch'`` (the convs get the dilations of
            ``rfstructure_file``), ``'fixed_multi_branch'`` (those dilations, then searchable
            ops around them that do not move). Defaults to ``'search'``.
        config (dict): ``dict(search=dict(step, max_step, search_interval, exp_rate,
            init_alphas, mmin, mmax, num_branches, skip_layer))``; ``skip_layer``: layers
            whose name contains one of these strings are left alone. Copied, not changed.
        rfstructure_file (str, optional): a searched-structure JSON to start from.
        by_epoch (bool): step after each epoch (True) or iteration. Defaults to True.
        verbose (bool): log every wrapped layer and rate change. Defaults to True.
    """

    def __init__(self, mode: str = 'search', config: Mapping | None = None,
                 rfstructure_file: str | None = None, by_epoch: bool = True,
                 verbose: bool = True):
        if mode not in MODES:
            raise ValueError(f'RFSearchHook mode must be one of {", ".join(MODES)}, got '
                             f'{mode!r}')
        if not isinstance(config, Mapping) or not isinstance(config.get('search'), Mapping):
            raise TypeError(f'RFSearchHook config must be dict(search=dict({", ".join(SEARCH_KEYS)}'
                            f')), got {config!r}')
        missing = [k for k in SEARCH_KEYS if k not in config['search']]
        if missing:
            raise KeyError(f'RFSearchHook config.search lacks {", ".join(missing)} (it needs '
                           f'{", ".join(SEARCH_KEYS)})')
        search = config['search']
        if search['num_branches'] not in (2, 3):
            raise ValueError(f"RFSearchHook config.search['num_branches'] must be 2 or 3, got "
                             f"{search['num_branches']!r}")
        if not 1 <= search['mmin'] <= search['mmax']:
            raise ValueError(f"RFSearchHook config.search needs 1 <= mmin <= mmax, got mmin="
                             f"{search['mmin']!r}, mmax={search['mmax']!r}")
        if not isinstance(search['search_interval'], int) or search['search_interval'] < 1:
            raise ValueError(f"RFSearchHook config.search['search_interval'] must be a positive "
                             f"int, got {search['search_interval']!r}")
        if mode != 'search' and rfstructure_file is None and not config.get('structure'):
            raise ValueError(f"RFSearchHook mode={mode!r} needs rfstructure_file: the JSON a "
                             "search run (mode='search') wrote to its work dir")
        self.config = _plain(config)
        self.config['structure'] = {}
        if rfstructure_file is not None:
            self.config['structure'] = load_rfstructure(rfstructure_file)
        self.mode = mode
        self.initial_step = search['step']
        self.num_branches = search['num_branches']
        self.by_epoch = by_epoch
        self.verbose = verbose

    @property
    def _skip(self):
        return self.config['search']['skip_layer'] or ()

    def init_model(self, model: nn.Module) -> None:
        """Prepare ``model`` for ``mode``, before its optimizer is built (the searchable ops
        add ``branch_weights`` parameters)."""
        if self.verbose:
            logger.info('RFSearch init begin.')
        if self.mode != 'search' or self.config['structure']:
            self.set_model(model)
        if self.mode != 'fixed_single_branch':
            self.wrap_model(model)
        if self.verbose:
            logger.info('RFSearch init end.')

    def before_run(self, runner) -> None:
        if self.mode != 'fixed_single_branch' and not self._ops(unwrap_model(runner.model)):
            runner.logger.warning(
                f'RFSearchHook (mode={self.mode!r}): the model has no Conv2dRFSearchOp, so '
                'nothing is searched. Build it with ckptzoo.apis.build_train_model (which calls '
                'rfnext_init_model), or call RFSearchHook.init_model(model) before the '
                'optimizer is built.')

    def before_save_checkpoint(self, runner, checkpoint) -> None:
        """The search's position and every op's rates go into ``meta['rfsearch']``: the
        weights alone do not say at which rates they were trained."""
        if self.mode != 'search':
            return
        ops = {name: dict(dilation=list(op.op_layer.dilation),
                          rates=[list(r) for r in op.dilation_rates])
               for name, op in self._ops(unwrap_model(runner.model))}
        checkpoint.setdefault('meta', {})['rfsearch'] = dict(
            step=self.config['search']['step'], ops=ops)

    def after_load_checkpoint(self, runner, checkpoint) -> None:
        """Resume the search where it stood (mmcv restarts it at the config's step with the
        initial rates, under weights trained at others): the step count and each op's rates
        from ``meta['rfsearch']``, then the step of the saved epoch (iteration) that ran after
        the checkpoint was written, on the same branch weights."""
        state = (checkpoint.get('meta') or {}).get('rfsearch')
        if self.mode != 'search' or state is None:
            return
        model = unwrap_model(runner.model)
        ops = dict(self._ops(model))
        if set(ops) != set(state['ops']):
            raise ValueError(f'the checkpoint searched other layers than this model has: '
                             f'{sorted(set(ops) ^ set(state["ops"]))[:3]}')
        for name, saved in state['ops'].items():
            op = ops[name]
            op.op_layer.dilation = tuple(saved['dilation'])
            op.op_layer.padding = op.get_padding(op.op_layer.dilation)
            op.dilation_rates = [tuple(r) for r in saved['rates']]
        self.config['search']['step'] = state['step']
        for name, op in ops.items():
            self.config['structure'][f'module.{name}'] = op.op_layer.dilation
        done = runner.epoch if self.by_epoch else runner.iter
        for _ in range(self.initial_step + done - state['step']):
            self.step(model, runner.work_dir)

    def after_train_epoch(self, runner) -> None:
        if self.by_epoch and self.mode == 'search':
            self.step(runner.model, runner.work_dir)

    def after_train_iter(self, runner) -> None:
        if not self.by_epoch and self.mode == 'search':
            self.step(runner.model, runner.work_dir)

    @staticmethod
    def _ops(model):
        return [(n, m) for n, m in model.named_modules() if isinstance(m, BaseConvRFSearchOp)]

    def step(self, model: nn.Module, work_dir: str | None) -> None:
        """One search step: every ``search_interval``-th (before ``max_step``) settles each
        op on its estimated rate, branches again around it and writes the structure to
        ``work_dir/local_search_config_step{n}.json``."""
        search = self.config['search']
        search['step'] += 1
        if search['step'] % search['search_interval'] or search['step'] >= search['max_step']:
            return
        model = unwrap_model(model)
        self.estimate_and_expand(model)
        for name, module in self._ops(model):
            self.config['structure'][f'module.{name}'] = module.op_layer.dilation
        if get_dist_info()[0] != 0:  # every rank moves its rates; one writes them
            return
        if work_dir is None:
            raise ValueError('RFSearchHook needs a work dir to write the searched structure '
                             'to: set work_dir in the config')
        path = osp.join(work_dir, f"local_search_config_step{search['step']}.json")
        with open(path, 'w', encoding='utf-8') as f:
            json.dump(_plain(self.config), f)

    def estimate_and_expand(self, model: nn.Module) -> None:
        """Each op settles on its estimated rate and branches again around it."""
        for _, module in self._ops(model):
            module.estimate_rates()
            module.expand_rates()

    def _eligible(self, model, prefix):
        """``(parent, attribute, full name, conv)`` of every searchable conv not skipped;
        full names are ``module.<path>`` (mmcv's); a skipped name's subtree is left alone."""
        for name, module in model.named_children():
            fullname = f'{prefix}.{name}'
            if any(layer in fullname for layer in self._skip):
                continue
            if isinstance(module, nn.Conv2d):
                if _searchable(module):
                    yield model, name, fullname, module
            elif not isinstance(module, BaseConvRFSearchOp):
                yield from self._eligible(module, fullname)

    def wrap_model(self, model: nn.Module, search_op: str = 'Conv2d', prefix: str = 'module'):
        """Replace every searchable conv by a :class:`Conv2dRFSearchOp` wrapping it."""
        if search_op != 'Conv2d':
            raise ValueError(f"search_op must be 'Conv2d' (the only searchable op), got "
                             f'{search_op!r}')
        for parent, name, fullname, conv in list(self._eligible(model, prefix)):
            op = Conv2dRFSearchOp(conv, self.config['search'], self.verbose)
            setattr(parent, name, op)
            if self.verbose:
                logger.info(f'Wrap model {conv} to {op}.')

    def set_model(self, model: nn.Module, search_op: str = 'Conv2d', prefix: str = 'module'):
        """Give every searchable conv its dilation from the loaded structure (and the padding
        that goes with it); a conv the structure does not name fails, naming it."""
        if search_op != 'Conv2d':
            raise ValueError(f"search_op must be 'Conv2d' (the only searchable op), got "
                             f'{search_op!r}')
        structure = self.config['structure']
        for _, _, fullname, conv in list(self._eligible(model, prefix)):
            if fullname not in structure:
                raise KeyError(f'the RF structure has no dilation for {fullname!r} (it names '
                               f'{len(structure)} layers, e.g. {list(structure)[:3]}): was it '
                               'searched on another model or skip_layer?')
            rate = structure[fullname]
            rate = [rate, rate] if isinstance(rate, int) else list(rate)
            structure[fullname] = rate
            conv.dilation = tuple(rate)
            conv.padding = tuple(get_single_padding(conv.kernel_size[i], conv.stride[i], rate[i])
                                 for i in (0, 1))
            if self.verbose:
                logger.info(f'Set module {fullname} dilation as: [{rate[0]} {rate[1]}]')


def rfnext_init_model(model: nn.Module, cfg: Any) -> RFSearchHook | None:
    """mmdet 2.28's ``rfnext_init_model``: when ``cfg.custom_hooks`` has an ``RFSearchHook``,
    prepare ``model`` with it (:meth:`RFSearchHook.init_model`) and return it; the entry's
    ``rfstructure_file`` then becomes None, so the runner's hook built from it later does not
    read the file again."""
    hooks = cfg.get('custom_hooks') if cfg is not None else None
    if not hooks:
        return None
    for entry in hooks if isinstance(hooks, (list, tuple)) else [hooks]:
        if isinstance(entry, Mapping) and isinstance(entry.get('type'), str) \
                and unscoped(entry['type']) == 'RFSearchHook':
            break
    else:
        return None
    hook = RFSearchHook(mode=entry.get('mode', 'search'), config=entry.get('config'),
                        rfstructure_file=entry.get('rfstructure_file'),
                        by_epoch=entry.get('by_epoch', True), verbose=entry.get('verbose', True))
    hook.init_model(model)
    entry['rfstructure_file'] = None
    # the runner's hook starts from this structure (mmdet's shares the dict the same way)
    entry['config'] = copy.deepcopy(hook.config) if entry.get('config') is not None else None
    return hook
