"""Registries: mmdet 2.x aliases, close-match errors, torch optimizers."""
import pytest
import torch

import ckptzoo  # noqa: F401  (registers the types)
from ckptzoo.registry import (BACKBONES, DETECTORS, HOOKS, MODELS, OPTIMIZERS, UnknownTypeError,
                              build_backbone, build_hook, build_optimizer)


def test_mmdet_aliases_share_one_registry():
    assert BACKBONES is MODELS and DETECTORS is MODELS
    assert build_backbone(dict(type='ResNet', depth=18, base_channels=8)).depth == 18


def test_unknown_type_names_type_registry_and_close_matches():
    with pytest.raises(UnknownTypeError, match=r"unknown model type 'ResNett': did you mean "
                       r'ResNet'):
        build_backbone(dict(type='ResNett', depth=18))
    with pytest.raises(KeyError, match=r"unknown hook type 'NoSuchThing'.*registered: .*Hook"):
        build_hook(dict(type='NoSuchThing'))


def test_missing_or_bad_type():
    with pytest.raises(KeyError, match='needs a "type" key'):
        build_backbone(dict(depth=18))
    with pytest.raises(TypeError, match='must be a dict'):
        build_backbone('ResNet')


def test_optimizers_from_torch():
    assert OPTIMIZERS.get('SGD') is torch.optim.SGD and OPTIMIZERS.get('AdamW') is torch.optim.AdamW
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    model[0].weight.requires_grad = False
    opt = build_optimizer(model, dict(type='SGD', lr=0.1, momentum=0.9))
    assert isinstance(opt, torch.optim.SGD) and opt.defaults['lr'] == 0.1
    assert len(opt.param_groups[0]['params']) == 3  # the frozen weight is left out
    with pytest.raises(UnknownTypeError, match="unknown optimizer type 'SDG': did you mean SGD"):
        build_optimizer(model, dict(type='SDG', lr=0.1))


def test_hook_registry():
    assert HOOKS.get('Hook') is not None


def test_scoped_types_of_mmdet_configs_resolve_to_ckptzoos():
    """mmdet 2.x configs write ``type='mmcls.ConvNeXt'`` (mmcls's backbone, with
    ``custom_imports=['mmcls.models']``); the scope names no other registry here."""
    model = build_backbone(dict(type='mmcls.ConvNeXt', arch='tiny', out_indices=[3]))
    assert type(model).__name__ == 'ConvNeXt'
    assert type(build_backbone(dict(type='mmdet.ResNet', depth=18))).__name__ == 'ResNet'
    with pytest.raises(UnknownTypeError, match="unknown model type 'mmcls.ConvNeXtt': did you "
                       'mean ConvNeXt'):
        build_backbone(dict(type='mmcls.ConvNeXtt'))
    with pytest.raises(UnknownTypeError, match="'mmseg.ResNet'"):  # not a scope ckptzoo reads
        build_backbone(dict(type='mmseg.ResNet', depth=18))


def test_mmcls_and_mmdet_scoped_names_are_ckptzoos():
    """mmdet configs name mmcls's models ``type='mmcls.TIMMBackbone'``: ckptzoo's own."""
    assert MODELS.get('mmcls.TIMMBackbone') is MODELS.get('TIMMBackbone') is not None
    assert MODELS.get('mmdet.ResNet') is MODELS.get('ResNet')
    with pytest.raises(UnknownTypeError, match="unknown model type 'mmseg.ResNet'"):
        build_backbone(dict(type='mmseg.ResNet', depth=18))
