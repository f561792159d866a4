"""Units derived for a part that describes none (a user's backbone or neck): read from its
module tree, exact in every mode, set by ``with_cp`` in its config, planned like any unit."""
import copy
import logging
import os.path as osp

import pytest
import torch
import torch.nn as nn

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.apis.config import check_config, load_config
from ckptzoo.apis.train import build_train_model
from ckptzoo.datasets import generate_coco
from ckptzoo.memory.measure.step import probe_batch, worst_case_shape
from ckptzoo.memory.measure.step_peak import measure_step
from ckptzoo.models.checkpointing import CheckpointOwnerMixin, derived_units
from ckptzoo.registry import MODELS, UnknownKeyError, build_model
from tests.helpers import user_parts  # noqa: F401  (registers the user's parts)
from tests.helpers.plans import plan_midway
from tests.helpers.checkpointing import assert_same_run, one_thread, run_once
from tests.helpers.configs import one_step_on_generated_coco

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

single_thread = pytest.fixture(one_thread)


@MODELS.register_module(force=True)
class Holder(CheckpointOwnerMixin, nn.Module):
    """A model holding user parts as a detector holds its backbone and neck (a container that
    describes no units of its own: its user parts get derived ones when it is built)."""

    def __init__(self, backbone, neck=None):
        super().__init__()
        self.backbone = build_model(backbone)
        self.neck = build_model(neck) if neck else None

    def forward(self, x):
        outs = self.backbone(x)
        return self.neck(outs) if self.neck is not None else outs


def _holder(backbone, neck=None):
    return build_model(dict(type='Holder', backbone=backbone, neck=neck))


def _pair(**kwargs):
    torch.manual_seed(0)
    plain = _holder(**kwargs).double().train()
    return plain, copy.deepcopy(plain)


def test_units_are_read_from_the_module_tree():
    model = _holder(dict(type='UserStageNet', depths=(2, 3)),
                   dict(type='UserConvNeck', in_channels=(16, 32)))
    assert list(model.checkpoint_units()) == [
        'backbone.stem', 'backbone.stages.0.0', 'backbone.stages.0.1', 'backbone.stages.1.0',
        'backbone.stages.1.1', 'backbone.stages.1.2', 'neck']
    assert model.checkpoint_chains() == [
        ['backbone.stages.0.0', 'backbone.stages.0.1'],
        ['backbone.stages.1.0', 'backbone.stages.1.1', 'backbone.stages.1.2']]
    # state-dict keys and the class are the user's own
    assert type(model.backbone).__name__ == 'UserStageNet'
    assert 'backbone.stages.1.2.body.0.weight' in model.state_dict()
    listnet = _holder(dict(type='UserListNet', depth=3))
    assert list(listnet.checkpoint_units()) == [f'backbone.blocks.{i}' for i in range(3)]
    assert listnet.checkpoint_chains() == []  # its own forward loops over a ModuleList


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_mode_is_exact(single_thread, count_cp, mode):
    plain, cp = _pair(backbone=dict(type='UserStageNet'),
                      neck=dict(type='UserConvNeck', in_channels=(32, 64)))
    cp.set_checkpoint_plan({'*': mode})
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64, requires_grad=True)
    ref = run_once(plain, x, 3)
    assert count_cp['checkpoints'] == 0
    assert_same_run(ref, run_once(cp, x, 3), cp)  # dropout replayed, BN statistics once
    if mode != 'offload':
        assert count_cp['checkpoints'] == len(cp.checkpoint_units())


def test_segments_and_a_forward_keyword_are_exact(single_thread):
    plain, seg = _pair(backbone=dict(type='UserStageNet', depths=(3, 2)))
    seg.set_checkpoint_segments([['backbone.stages.0.0', 'backbone.stages.0.2']])
    seg.set_checkpoint_plan({'backbone.stem': 'full', 'backbone.stages.1': 'selective'})
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    assert_same_run(run_once(plain, x, 5), run_once(seg, x, 5), seg)
    torch.manual_seed(0)
    plain = _holder(dict(type='UserListNet')).double()
    cp = copy.deepcopy(plain)
    cp.set_checkpoint_plan({'backbone.blocks.1': 'full'})
    x = torch.randn(1, 3, 16, 16, dtype=torch.float64, requires_grad=True)
    outs = []
    for model in (plain, cp):
        torch.manual_seed(1)
        out = model.backbone(x, scale=0.5)[0]
        outs.append((out, torch.autograd.grad(out.sum(), list(model.parameters()))))
    torch.testing.assert_close(outs[1][0], outs[0][0], rtol=0, atol=0)
    for a, b in zip(outs[0][1], outs[1][1]):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-12)


def test_the_container_derives_the_units():
    """Units are derived when the part's container (a detector) is built; a user's head that
    a built-in owner runs inside one of its units (a mask head in ``roi_head.mask``) gets none
    (tests/test_models/test_roi_heads/test_standard_roi_head.py)."""
    alone = build_model(dict(type='UserStageNet'))
    assert derived_units(alone) is None  # built outside a container: nothing derived
    model = _holder(dict(type='UserStageNet'))
    assert derived_units(model.backbone) is not None


def test_no_checkpoint_where_no_gradient_flows(single_thread, count_cp):
    model = _holder(dict(type='UserStageNet')).train()
    model.set_checkpoint_plan({'*': 'full'})
    for p in model.parameters():
        p.requires_grad_(False)
    model(torch.randn(1, 3, 32, 32))
    assert count_cp['checkpoints'] == 0  # the grad guard of the built-in units
    with torch.no_grad():
        model.eval()(torch.randn(1, 3, 32, 32))
    assert count_cp['checkpoints'] == 0


def test_a_copy_runs_its_own_modules(single_thread):
    model = _holder(dict(type='UserStageNet'))
    twin = copy.deepcopy(model)
    owner = derived_units(twin.backbone)
    assert owner is not derived_units(model.backbone)
    assert all(m is twin.backbone.get_submodule(n) for n, m, *_ in owner.entries)
    assert twin.backbone.stem.forward.module is twin.backbone.stem
    twin.set_checkpoint_plan({'*': 'full'})
    assert all(m is None for m in model.checkpoint_plan().values())


def test_with_cp_in_the_config():
    model = _holder(dict(type='UserStageNet', with_cp=True))
    assert set(model.checkpoint_plan().values()) == {'full'}
    # a class that takes with_cp keeps it; its derived units start plain
    own = _holder(dict(type='UserCheckpointedNet', with_cp=True))
    assert own.backbone.with_cp is True
    assert set(own.checkpoint_plan().values()) == {None}


def _retinanet_cfg(**backbone):
    cfg = load_config(osp.join(ROOT, 'configs/coco/retinanet_r18_fpn_synthetic_coco_cp.py'))
    cfg.custom_imports = dict(imports=['tests.helpers.user_parts'], allow_failed_imports=False)
    cfg.model.backbone = dict(type='UserStageNet', width=8, depths=(2, 2, 2),
                              out_indices=(0, 1, 2), **backbone)
    cfg.model.neck.update(in_channels=[16, 32, 64], out_channels=16, num_outs=3)
    cfg.model.bbox_head.update(in_channels=16, feat_channels=16, stacked_convs=1)
    cfg.model.bbox_head.anchor_generator.update(strides=[4, 8, 16])
    return cfg


def test_the_config_check_takes_with_cp_and_names_a_typo():
    check_config(_retinanet_cfg(with_cp=True))
    with pytest.raises(UnknownKeyError, match="'model.backbone.with_cpp'"):
        check_config(_retinanet_cfg(with_cpp=True))


@pytest.mark.slow
def test_a_user_backbone_trains_with_cp_and_is_planned(tmp_path):
    root = generate_coco(str(tmp_path / 'coco'), num_train=4, num_val=0, img_size=(64, 64),
                         classes=('circle', 'square', 'triangle'), seed=0)
    cfg = _retinanet_cfg(with_cp=True)
    one_step_on_generated_coco(cfg, root, str(tmp_path / 'work'))
    set_random_seed(0)
    model = build_train_model(cfg)
    units = list(model.checkpoint_units())
    assert units[:7] == ['backbone.stem'] + [f'backbone.stages.{i}.{j}' for i in range(3)
                                             for j in range(2)]
    assert all(model.checkpoint_plan()[u] == 'full' for u in units[:7])
    run = build_training(cfg, model=model, logger=logging.getLogger('ckptzoo.test.derived'))
    batch = probe_batch(run, worst_case_shape(cfg), boxes_per_image=3)
    # with_cp trains as plain: the same losses and gradients
    plain = copy.deepcopy(model)
    plain.set_checkpoint_plan({'*': None})
    grads = []
    for m in (plain, model):
        m.zero_grad()
        torch.manual_seed(0)
        losses = m(**copy.copy(batch))
        sum(v if torch.is_tensor(v) else sum(v) for v in losses.values()).backward()
        grads.append([p.grad.clone() for p in m.parameters() if p.grad is not None])
    assert len(grads[0]) == len(grads[1]) > 0
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    # planned: the measured peak within the budget, the prediction within 5 %
    table, result, budget = plan_midway(run, cfg, batch, units[:7])
    assert measure_step(run, batch)[0] <= budget
