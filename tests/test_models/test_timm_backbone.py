"""TIMMBackbone (mmcls 0.25's, over ``timm.create_model``): timm's keys and outputs, checkpoint
units found from the feature net's structure (any family), every mode exact with drop path,
weights loaded by ``init_weights`` (never downloaded), bad input, the ``mmcls.`` config
interface, and RetinaNets over eight timm families of different kinds planned under a budget."""
import copy
import logging
import os.path as osp

import pytest
import timm
import torch
from mmengine.config import Config
from torch.nn.modules.batchnorm import _BatchNorm

from ckptzoo.apis.config import load_config
from ckptzoo.models import TIMMBackbone
from ckptzoo.registry import build_backbone
from tests.helpers.plans import plan_midway
from tests.helpers.checkpointing import assert_same_run, one_thread, randomise_bn, run_once

one_thread = pytest.fixture(autouse=True)(one_thread)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

#: kind: (model_name, out_indices, timm arguments); tiny variants, drop path on where timm has it
FAMILIES = {
    'convnext': ('convnext_atto', (0, 1, 2, 3), dict(drop_path_rate=0.2)),
    'efficientnet': ('efficientnet_b0', (1, 2, 3, 4), dict(drop_path_rate=0.2)),
    'regnet': ('regnetx_002', (1, 2, 3, 4), dict(drop_path_rate=0.2)),
    'resnet-d': ('resnet50d', (1, 2, 3, 4), dict(drop_path_rate=0.2)),
    'mobilenetv3': ('mobilenetv3_small_050', (1, 2, 3, 4), dict(drop_path_rate=0.2)),
    'cspnet': ('cs3darknet_focus_s', (1, 2, 3, 4), dict(drop_path_rate=0.2)),
    'pvt_v2': ('pvt_v2_b0', (0, 1, 2, 3), dict(drop_path_rate=0.2)),
    'nfnet': ('nf_regnet_b0', (1, 2, 3, 4), dict(drop_path_rate=0.2)),
    'repvgg': ('repvgg_a0', (1, 2, 3, 4), dict(drop_path_rate=0.2)),
}
FAST = ('mobilenetv3', 'regnet', 'pvt_v2')
#: images per batch of the RetinaNet tests: RepVGG's weights (its 1280-channel last stage)
#: outweigh two 64 px images' activations, so no plan changes its peak
BATCH = dict(repvgg=16)


def _families(fast):
    return [pytest.param(k, marks=() if k in fast else pytest.mark.slow) for k in FAMILIES]


def _backbone(kind, **kwargs):
    name, out_indices, extra = FAMILIES[kind]
    return build_backbone(dict(type='mmcls.TIMMBackbone', model_name=name, features_only=True,
                               out_indices=out_indices, **extra, **kwargs))


def test_keys_outputs_and_feature_info_are_timms():
    model = _backbone('regnet').eval()
    ref = timm.create_model('regnetx_002', features_only=True, out_indices=(1, 2, 3, 4)).eval()
    assert list(model.state_dict()) == [f'timm_model.{k}' for k in ref.state_dict()]
    ref.load_state_dict({k[len('timm_model.'):]: v for k, v in model.state_dict().items()})
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        outs, expected = model(x), ref(x)
    assert isinstance(outs, tuple) and len(outs) == 4
    for a, b in zip(outs, expected):
        assert torch.equal(a, b)
    assert model.timm_model.feature_info.channels() == [24, 56, 152, 368]
    # features_only=False: mmcls's classifier without its head, its output as a 1-tuple
    clf = TIMMBackbone('regnetx_002').eval()
    with torch.no_grad():
        out = clf(x)
    assert len(out) == 1 and out[0].shape == (2, 368, 2, 2)
    assert list(clf.checkpoint_units()) == ['timm_model']


def test_units_come_from_the_feature_nets_structure():
    """A stage that is an nn.Sequential of blocks is a unit per block, a deep stem of layers
    one unit, an in-place activation joins the unit before it; other stages are units."""
    resnet = TIMMBackbone('resnet18d', features_only=True, out_indices=(1, 2, 3, 4))
    assert list(resnet.checkpoint_units()) == [
        'timm_model.conv1', 'timm_model.bn1', 'timm_model.maxpool'] + [
        f'timm_model.layer{i}.{j}' for i in range(1, 5) for j in range(2)]
    assert resnet._groups[1][1] == [resnet.timm_model.bn1, resnet.timm_model.act1]
    eff = TIMMBackbone('mobilenetv3_small_050', features_only=True)
    names = list(eff.checkpoint_units())
    assert names[:3] == ['timm_model.conv_stem', 'timm_model.bn1', 'timm_model.blocks.0.0']
    assert names[-1] == 'timm_model.blocks.5.0' and len(names) == 14
    convnext = TIMMBackbone('convnext_atto', features_only=True)
    assert list(convnext.checkpoint_units()) == ['timm_model.stem_0', 'timm_model.stem_1'] + [
        f'timm_model.stages_{i}' for i in range(4)]
    assert convnext.checkpoint_chains() == [list(convnext.checkpoint_units())]


def test_a_model_of_another_form_is_one_coarse_unit():
    """timm's ViT feature net calls ``forward_intermediates`` (no module sequence): the whole
    model is one unit, exact too."""
    torch.manual_seed(0)
    plain = TIMMBackbone('vit_tiny_patch16_224', features_only=True, img_size=32,
                         out_indices=(1, 2), drop_path_rate=0.2).train()
    assert list(plain.checkpoint_units()) == ['timm_model']
    x = torch.rand(2, 3, 32, 32, requires_grad=True)
    ref = run_once(copy.deepcopy(plain), x, seed=5)
    assert [tuple(o.shape) for o in ref[0]] == [(2, 192, 2, 2)] * 2
    model = copy.deepcopy(plain)
    model.set_checkpoint_plan({'*': 'full'})
    assert_same_run(ref, run_once(model, x, seed=5), model)


def _randomise(model):
    """Random BN statistics, and no zero-initialised gains (NFNet's skipinit, layer scales)
    that would hide a branch's gradients."""
    randomise_bn(model)
    with torch.no_grad():
        for p in model.parameters():
            if not p.any():
                p.uniform_(0.5, 1.5)


def _modes_equal_plain(kind, mode, segments=False):
    torch.manual_seed(0)
    plain = _backbone(kind).train()
    _randomise(plain)
    x = torch.rand(2, 3, 64, 64, requires_grad=True)
    ref = run_once(copy.deepcopy(plain), x, seed=5)
    model = copy.deepcopy(plain)
    if segments:
        names = list(model.checkpoint_units())
        model.set_checkpoint_segments([[names[0], names[len(names) // 2]],
                                       [names[len(names) // 2 + 1], names[-1]]])
    else:
        model.set_checkpoint_plan({'*': mode})
        assert model.with_cp
    assert_same_run(ref, run_once(model, x, seed=5), model)


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('kind', _families(FAST))
def test_every_mode_equals_plain(kind, mode):
    """Outputs, every gradient (input too) and BN buffers as the plain run, drop path on."""
    _modes_equal_plain(kind, mode)


@pytest.mark.parametrize('kind', _families(('mobilenetv3', )))
def test_segments_equal_plain(kind):
    _modes_equal_plain(kind, None, segments=True)


def test_with_cp_sets_every_unit_full():
    model = TIMMBackbone('regnetx_002', features_only=True, with_cp=True)
    assert set(model.checkpoint_plan().values()) == {'full'} and model.with_cp
    assert not TIMMBackbone('regnetx_002', features_only=True).with_cp


def test_bad_arguments_name_what_is_allowed():
    with pytest.raises(ValueError, match=r"unknown timm model_name 'resnet5d'.*did you mean "
                                         r".*resnet50d"):
        TIMMBackbone('resnet5d')
    with pytest.raises(ValueError, match=r'out_indices \(1, 2, 3, 4\) out of range for timm '
                                         r"model 'convnext_atto': it has 4 features, "
                                         r'indices 0..3'):
        TIMMBackbone('convnext_atto', features_only=True, out_indices=(1, 2, 3, 4))
    with pytest.raises(TypeError, match='pretrained must be a bool'):
        TIMMBackbone('regnetx_002', pretrained='model.pth')
    with pytest.raises(ValueError, match="unknown norm_layer 'BatchNorm'"):
        TIMMBackbone('resnet18', norm_layer='BatchNorm')
    model = TIMMBackbone('resnet18', features_only=True, norm_layer='BN')  # mmcv's names
    assert isinstance(model.timm_model.bn1, _BatchNorm)


def test_weights_load_in_init_weights_never_downloaded(tmp_path, monkeypatch):
    """``checkpoint_path``: a classifier's file loads into the feature net (mmcls warns that
    timm fails there); ``pretrained``: only from the local caches, else a message."""
    clf = timm.create_model('regnetx_002')
    torch.save(clf.state_dict(), tmp_path / 'w.pth')
    model = TIMMBackbone('regnetx_002', features_only=True, out_indices=(1, 2, 3, 4),
                         checkpoint_path=str(tmp_path / 'w.pth'))
    assert not torch.equal(model.timm_model.s1.b1.conv1.conv.weight, clf.s1.b1.conv1.conv.weight)
    model.init_weights()
    assert torch.equal(model.timm_model.s1.b1.conv1.conv.weight, clf.s1.b1.conv1.conv.weight)
    import huggingface_hub.constants as hf
    monkeypatch.setattr(hf, 'HF_HUB_CACHE', str(tmp_path / 'hub'))
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path / 'torch_hub'))
    model = TIMMBackbone('regnetx_002', features_only=True, pretrained=True)
    with pytest.raises(FileNotFoundError, match=r'not downloaded at run time.*timm/regnetx_002'):
        model.init_weights()
    # the Hugging Face cache's layout: refs/main names the snapshot that holds the file
    repo = tmp_path / 'hub' / 'models--timm--regnetx_002.pycls_in1k'
    (repo / 'refs').mkdir(parents=True)
    (repo / 'refs' / 'main').write_text('abc123')
    (repo / 'snapshots' / 'abc123').mkdir(parents=True)
    torch.save(clf.state_dict(), repo / 'snapshots' / 'abc123' / 'pytorch_model.bin')
    model.init_weights()
    assert torch.equal(model.timm_model.s4.b7.conv3.conv.weight, clf.s4.b7.conv3.conv.weight)


def test_mmdet_config_with_mmcls_scope_and_custom_imports_loads(tmp_path):
    path = tmp_path / 'cfg.py'
    path.write_text("custom_imports = dict(imports=['mmcls.models'], allow_failed_imports=False)\n"
                    "model = dict(type='mmcls.TIMMBackbone', model_name='regnetx_002', "
                    "features_only=True, pretrained=True, out_indices=(1, 2, 3, 4))\n")
    cfg = load_config(str(path))
    assert isinstance(build_backbone(cfg.model), TIMMBackbone)
    path.write_text("custom_imports = dict(imports=['not_a_module_x'], "
                    "allow_failed_imports=False)\n")
    with pytest.raises(ImportError, match='not_a_module_x'):
        load_config(str(path))


# ------------------------------------------------------------------ RetinaNet, planned
@pytest.fixture(scope='module')
def coco_root(tmp_path_factory):
    from ckptzoo.datasets import generate_coco
    from ckptzoo.datasets.synthetic_voc import SYNTHETIC_CLASSES
    tmp = tmp_path_factory.mktemp('timm_coco')
    return generate_coco(str(tmp / 'coco'), num_train=4, num_val=0, img_size=(64, 64),
                         classes=SYNTHETIC_CLASSES, seed=0)


def _retinanet_cfg(kind, root, work_dir):
    from ckptzoo.datasets.synthetic_voc import SYNTHETIC_CLASSES
    name, out_indices, extra = FAMILIES[kind]
    backbone = dict(type='mmcls.TIMMBackbone', model_name=name, features_only=True,
                    pretrained=False, out_indices=out_indices, **extra)
    with torch.device('meta'):
        channels = build_backbone(backbone).timm_model.feature_info.channels()
    cfg = Config.fromfile(osp.join(ROOT, 'configs/coco/retinanet_r18_fpn_synthetic_coco_cp.py'))
    cfg.model.backbone = backbone
    cfg.model.neck.update(in_channels=channels, out_channels=16)
    cfg.model.bbox_head.update(num_classes=len(SYNTHETIC_CLASSES), in_channels=16,
                               feat_channels=16)
    for t in cfg.data.train.pipeline:
        if t['type'] == 'Resize':
            t.update(img_scale=[(64, 64)], multiscale_mode='value')
    cfg.data.train.update(classes=SYNTHETIC_CLASSES,
                          ann_file=osp.join(root, 'annotations/instances_train2017.json'),
                          img_prefix=osp.join(root, 'train2017/'))
    cfg.data.update(samples_per_gpu=BATCH.get(kind, 2))
    cfg.work_dir = work_dir
    cfg.checkpoint_config = cfg.lr_config = cfg.evaluation = cfg.log_config = None
    cfg.runner = dict(type='IterBasedRunner', max_iters=1)
    cfg.optimizer = dict(type='SGD', lr=0.01, momentum=0.9)
    return cfg


def _loss_step(model, batch):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    losses = model(**copy.copy(batch))
    total = sum(v.sum() if torch.is_tensor(v) else sum(t.sum() for t in v)
                for k, v in losses.items() if 'loss' in k)
    total.backward()
    return (total.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                             if p.grad is not None},
            {n: b.clone() for n, b in model.named_buffers()})


@pytest.mark.slow
@pytest.mark.parametrize('kind', list(FAMILIES))
def test_retinanet_trains_exactly_and_is_planned_under_a_budget(kind, coco_root, tmp_path):
    """Builds, a training step with every unit 'full' equals the plain one, and the planner's
    plan at a budget between the all-'full' and the plain peaks fits it, as predicted (5 %)."""
    from ckptzoo.apis import build_training, set_random_seed
    from ckptzoo.apis.train import build_train_model
    from ckptzoo.memory.measure.step import probe_batch, worst_case_shape
    from ckptzoo.memory.measure.step_peak import measure_step

    cfg = _retinanet_cfg(kind, coco_root, str(tmp_path / 'work'))
    set_random_seed(0)
    model = build_train_model(cfg)
    run = build_training(cfg, model=model, logger=logging.getLogger('test_timm_backbone'))
    batch = probe_batch(run, worst_case_shape(cfg), boxes_per_image=3)
    units = list(model.checkpoint_units())
    assert sum(n.startswith('backbone.timm_model.') for n in units) >= 5
    full = copy.deepcopy(model)
    full.set_checkpoint_plan({'backbone': 'full'})
    ref, got = _loss_step(copy.deepcopy(model), batch), _loss_step(full, batch)
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=0)
    assert got[1].keys() == ref[1].keys()
    for name in ref[1]:
        torch.testing.assert_close(got[1][name], ref[1][name], rtol=0, atol=1e-6,
                                   msg=lambda m: f'{name}: {m}')
    for name in ref[2]:
        assert torch.equal(got[2][name], ref[2][name]), name
    table, result, budget = plan_midway(run, cfg, batch)
    assert measure_step(run, batch)[0] <= budget
    logging.getLogger('test_timm_backbone').info(
        '%s: budget %d: predicted %d measured %d (%d of %d units '
        'checkpointed, %d segments)', kind, budget, result.predicted_peak_bytes,
        result.measured_peak_bytes, sum(m is not None for m in result.plan.values()),
        len(result.plan), len(result.segments))
