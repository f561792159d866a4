"""Shared helpers of the neck tests: an mmdet config's neck, a seeded train step, every
checkpoint mode (and a segment) compared with the plain run."""
import copy
import os.path as osp

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root

__all__ = ['mmdet_neck_cfg', 'neck_step', 'assert_every_mode_exact']


def mmdet_neck_cfg(rel):
    """``model.neck`` of mmdet's config ``rel`` (skips the test without mmdet's configs)."""
    from mmengine.config import Config
    root = mmdet_configs_root()
    if root is None:
        pytest.skip("mmdet 2.28.2's configs are not installed")
    return Config.fromfile(osp.join(root, rel), import_custom_modules=False).model.neck.to_dict()


def neck_step(neck, feats, seed=5):
    """A train forward and backward of a fixed random weighting of every output: (outputs,
    input gradients, parameter gradients by name, buffers by name)."""
    neck.zero_grad(set_to_none=True)
    feats = [f.clone().requires_grad_() for f in feats]
    outs = neck(feats)
    gen = torch.Generator().manual_seed(seed)
    sum((o * torch.randn(o.shape, generator=gen)).sum() for o in outs).backward()
    return ([o.detach() for o in outs], [f.grad for f in feats],
            {n: p.grad for n, p in neck.named_parameters()},
            {n: b.clone() for n, b in neck.named_buffers()})


def assert_every_mode_exact(make, feats, segments=None, unused=()):
    """``make(with_cp)`` builds the neck; every unit in each mode, ``with_cp=True`` and the
    ``segments`` (default: each chain of two or more units as one) equal the plain run:
    outputs, every gradient and every buffer (BN statistics), bit for bit. Parameters whose
    name contains one of ``unused`` get no gradient (built, never run), all others do."""
    torch.manual_seed(0)
    plain = make(False)
    ref = neck_step(plain, feats)
    for key, grad in ref[2].items():
        assert (grad is None) == any(u in key for u in unused), key
    runs = {}
    for mode in ('full', 'selective', 'offload'):
        runs[mode] = copy.deepcopy(plain)
        runs[mode].set_checkpoint_plan({'*': mode})
    runs['with_cp'] = make(True)
    runs['with_cp'].load_state_dict(plain.state_dict())
    assert all(m == 'full' for m in runs['with_cp'].checkpoint_plan().values())
    chains = plain.checkpoint_chains()
    segments = [[c[0], c[-1]] for c in chains] if segments is None else segments
    if segments:
        runs['segment'] = copy.deepcopy(plain)
        runs['segment'].set_checkpoint_segments(segments)
    # every run starts from the plain model's buffers as they were before its step
    start = {n: b.clone() for n, b in make(False).named_buffers()}
    for name, neck in runs.items():
        with torch.no_grad():
            for n, b in neck.named_buffers():
                b.copy_(start[n])
        got = neck_step(neck, feats)
        for a, b in zip(ref[0] + ref[1], got[0] + got[1]):
            torch.testing.assert_close(b, a, rtol=0, atol=0, msg=lambda m: f'{name}: {m}')
        for part, what in ((2, 'gradient'), (3, 'buffer')):
            assert ref[part].keys() == got[part].keys()
            for key in ref[part]:
                if ref[part][key] is None:
                    assert got[part][key] is None, f'{name} {what} {key}'
                    continue
                torch.testing.assert_close(got[part][key], ref[part][key], rtol=0, atol=0,
                                           msg=lambda m: f'{name} {what} {key}: {m}')
