"""optimizer.paramwise_cfg: the groups mmcv 1.x's DefaultOptimizerConstructor builds."""
import pytest
import torch
import torch.nn as nn

from ckptzoo.registry import OPTIMIZER_BUILDERS, build_backbone, build_optimizer
from ckptzoo.runner.optimizer_constructor import PARAMWISE_KEYS, DefaultOptimizerConstructor

LR, WD = 0.01, 0.05


def _groups(optimizer, model):
    """name -> (lr, weight_decay) of each parameter's group (one parameter per group)."""
    names = {id(p): n for n, p in model.named_parameters()}
    out = {}
    for group in optimizer.param_groups:
        assert len(group['params']) == 1
        out[names[id(group['params'][0])]] = (group['lr'], group['weight_decay'])
    return out


def test_swin_custom_keys_as_mmdet_configs():
    model = build_backbone(dict(type='SwinTransformer', embed_dims=16, depths=(2, 1),
                                num_heads=(2, 4), window_size=4, out_indices=(0, 1)))
    keys = {'absolute_pos_embed': dict(decay_mult=0.), 'relative_position_bias_table':
            dict(decay_mult=0.), 'norm': dict(decay_mult=0.)}
    opt = build_optimizer(model, dict(type='AdamW', lr=LR, betas=(0.9, 0.999), weight_decay=WD,
                                      paramwise_cfg=dict(custom_keys=keys)))
    assert isinstance(opt, torch.optim.AdamW)
    got = _groups(opt, model)
    # the reference: a parameter whose dotted name contains a key gets no decay, others the
    # optimizer's; the lr is never changed (lr_mult defaults to 1)
    expected = {name: (LR, 0.0 if any(k in name for k in keys) else WD)
                for name, _ in model.named_parameters()}
    assert got == expected
    assert list(got) == [n for n, _ in model.named_parameters()]  # module order, as mmcv
    zero = {n for n, (_, wd) in got.items() if wd == 0}
    assert any('relative_position_bias_table' in n for n in zero)
    assert {'patch_embed.norm.weight', 'norm0.bias', 'stages.0.blocks.0.norm1.weight',
            'stages.0.downsample.norm.weight'} <= zero
    assert 'stages.0.blocks.0.attn.w_msa.qkv.weight' not in zero
    assert 'stages.0.blocks.0.attn.w_msa.qkv.bias' not in zero  # custom keys win over bias rules


class DeformConv2d(nn.Module):
    """What mmcv's deformable conv looks like to the constructor: a conv_offset child."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(2, 2, 3, 3))
        self.conv_offset = nn.Conv2d(2, 18, 3, padding=1)


class Net(nn.Module):

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.dw = nn.Conv2d(4, 4, 3, groups=4)
        self.gn = nn.GroupNorm(2, 4)
        self.dcn = DeformConv2d()
        self.head = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
        self.head_cls = nn.Linear(4, 2)
        self.frozen = nn.Linear(2, 2)
        self.frozen.requires_grad_(False)
        self.scale = nn.Parameter(torch.ones(1))


def test_all_rules_by_hand():
    model = Net()
    cfg = dict(custom_keys={'head': dict(lr_mult=0.1, decay_mult=0.9),
                            'head_cls': dict(lr_mult=0.5), '.scale': dict(decay_mult=0.)},
               bias_lr_mult=2., bias_decay_mult=0.3, norm_decay_mult=0., dwconv_decay_mult=0.7,
               dcn_offset_lr_mult=0.25)
    opt = build_optimizer(model, dict(type='SGD', lr=LR, momentum=0.9, weight_decay=WD,
                                      paramwise_cfg=cfg))
    got = _groups(opt, model)
    expected = {
        'scale': (LR, 0.0),  # top level: matched as '.scale', as mmcv
        'conv.weight': (LR, WD), 'conv.bias': (2 * LR, 0.3 * WD),
        'bn.weight': (LR, 0.0), 'bn.bias': (LR, 0.0),  # no bias_lr_mult on norm biases
        'dw.weight': (LR, 0.7 * WD), 'dw.bias': (2 * LR, 0.7 * WD),  # dwconv before bias
        'gn.weight': (LR, 0.0), 'gn.bias': (LR, 0.0),
        'dcn.weight': (LR, WD),
        'dcn.conv_offset.weight': (0.25 * LR, WD),
        'dcn.conv_offset.bias': (0.25 * LR, WD),  # neither bias_lr_mult nor bias_decay_mult
        'head.0.weight': (0.1 * LR, 0.9 * WD), 'head.0.bias': (0.1 * LR, 0.9 * WD),
        'head.1.weight': (0.1 * LR, 0.9 * WD), 'head.1.bias': (0.1 * LR, 0.9 * WD),
        'head_cls.weight': (0.5 * LR, WD), 'head_cls.bias': (0.5 * LR, WD),  # longest key
        'frozen.weight': (LR, WD), 'frozen.bias': (LR, WD),  # frozen: the defaults, kept
    }
    assert got.keys() == expected.keys()
    for name, (lr, wd) in expected.items():
        assert got[name] == pytest.approx((lr, wd), rel=1e-12, abs=0), name
    frozen_groups = [g for g in opt.param_groups if not g['params'][0].requires_grad]
    assert len(frozen_groups) == 2


def test_equal_length_keys_pick_the_alphabetical_first():
    model = nn.Sequential()
    model.add_module('ab', nn.Linear(2, 2))
    cfg = dict(custom_keys={'b.': dict(lr_mult=3.), 'ab': dict(lr_mult=2.), 'a': dict(lr_mult=4.)})
    got = _groups(build_optimizer(model, dict(type='SGD', lr=LR, paramwise_cfg=cfg)), model)
    assert got['ab.weight'][0] == pytest.approx(2 * LR)


def test_bypass_duplicate():
    model = nn.ModuleDict(dict(a=nn.Linear(2, 2), b=nn.Linear(2, 2), c=nn.Linear(2, 2),
                               d=nn.Linear(2, 2)))
    model.b.weight = model.a.weight  # tied weights: one parameter in two modules
    model.c.requires_grad_(False)
    model.d.weight = model.c.weight
    cfg = dict(type='SGD', lr=LR, weight_decay=WD, paramwise_cfg=dict(norm_decay_mult=0.))
    with pytest.raises(ValueError, match=r'parameter b\.weight is shared.*bypass_duplicate=True'):
        build_optimizer(model, cfg)
    cfg['paramwise_cfg']['bypass_duplicate'] = True
    with pytest.warns(UserWarning, match='is duplicate') as record:
        opt = build_optimizer(model, cfg)
    assert sorted(str(w.message).split()[0] for w in record) == ['b', 'd']
    assert len(opt.param_groups) == 6  # a.w a.b b.b c.w c.b d.b


def test_no_paramwise_cfg_is_one_group_of_trainable_parameters():
    model = Net()
    for paramwise_cfg in (None, {}):
        opt = build_optimizer(model, dict(type='SGD', lr=LR, paramwise_cfg=paramwise_cfg))
        assert len(opt.param_groups) == 1
        assert len(opt.param_groups[0]['params']) == sum(
            p.requires_grad for p in model.parameters())


def test_trains_with_the_groups():
    torch.manual_seed(0)
    model = Net()
    opt = build_optimizer(model, dict(type='SGD', lr=LR, weight_decay=WD, paramwise_cfg=dict(
        custom_keys={'conv': dict(lr_mult=0.)})))
    before = model.conv.weight.detach().clone(), model.bn.weight.detach().clone()
    out = model.bn(model.conv(torch.randn(2, 2, 5, 5)))
    out.sum().backward()
    opt.step()
    assert torch.equal(model.conv.weight, before[0])  # lr 0
    assert not torch.equal(model.bn.weight, before[1])


def test_constructor_key_and_registry():
    assert OPTIMIZER_BUILDERS.get('DefaultOptimizerConstructor') is DefaultOptimizerConstructor

    @OPTIMIZER_BUILDERS.register_module(force=True)
    class HalfLrConstructor(DefaultOptimizerConstructor):

        def __call__(self, model):
            self.optimizer_cfg['lr'] /= 2
            return super().__call__(model)

    opt = build_optimizer(Net(), dict(type='SGD', lr=0.2, constructor='HalfLrConstructor'))
    assert opt.param_groups[0]['lr'] == 0.1
    with pytest.raises(KeyError, match="unknown optimizer constructor type 'NoSuch'"):
        build_optimizer(Net(), dict(type='SGD', lr=0.2, constructor='NoSuch'))


def test_bad_paramwise_cfg():
    model = Net()
    with pytest.raises(KeyError) as err:
        build_optimizer(model, dict(type='SGD', lr=LR, weight_decay=WD,
                                    paramwise_cfg=dict(norm_decay=0.)))
    assert "'norm_decay'" in str(err.value) and all(k in str(err.value) for k in PARAMWISE_KEYS)
    with pytest.raises(KeyError, match=r"'lr_mul'.*custom_keys\['head'\].*lr_mult, decay_mult"):
        build_optimizer(model, dict(type='SGD', lr=LR, paramwise_cfg=dict(
            custom_keys={'head': dict(lr_mul=0.1)})))
    with pytest.raises(ValueError, match='norm_decay_mult but the optimizer config has no '
                       'weight_decay'):
        build_optimizer(model, dict(type='SGD', lr=LR, paramwise_cfg=dict(norm_decay_mult=0.)))
    with pytest.raises(ValueError, match=r"custom_keys\['head'\] sets decay_mult"):
        build_optimizer(model, dict(type='SGD', lr=LR, paramwise_cfg=dict(
            custom_keys={'head': dict(decay_mult=0.)})))
    with pytest.raises(TypeError, match='custom_keys must be a dict'):
        build_optimizer(model, dict(type='SGD', lr=LR, paramwise_cfg=dict(custom_keys=['head'])))
    with pytest.raises(TypeError, match='bias_lr_mult must be a number'):
        build_optimizer(model, dict(type='SGD', lr=LR, paramwise_cfg=dict(bias_lr_mult='2')))
    with pytest.raises(TypeError, match='paramwise_cfg must be None or a dict'):
        build_optimizer(model, dict(type='SGD', lr=LR, paramwise_cfg=[1]))
