"""mmdet 2.28.2's ``rfnext/`` configs (RF-Next on Res2Net, HRNet, ConvNeXt and PVTv2 detectors,
walked from the installed config tree): their models build, their config passes the check, and
their ``RFSearchHook`` prepares the model as mmdet's ``rfnext_init_model`` does. The search
configs wrap the convs; the fixed ones name a ``search_log/`` JSON that mmdet does not ship,
which is refused before anything trains, and with a JSON the search mode wrote they set (single
branch) or branch around (multi branch) the searched dilations."""
import json
import os.path as osp
import warnings

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('rfnext', )) if ROOT else []
SEARCH = [n for n in CONFIGS if 'rfnext_search_' in n]
FIXED = [n for n in CONFIGS if 'rfnext_fixed_' in n]
# mmdet's own bug: this config's hook has no type='RFSearchHook' (mmdet's rfnext_init_model
# fails on it with KeyError: 'type'); ours refuses it in the config check, naming the keys
NO_HOOK_TYPE = {'rfnext/rfnext_fixed_multi_branch_cascade_mask_rcnn_hrnetv2p_w18_20e_coco.py'}

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def _cfg(name):
    from mmengine.config import Config
    return Config.fromfile(osp.join(ROOT, name), import_custom_modules=False)


def _meta_model(cfg):
    from ckptzoo.registry import build_detector
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        return build_detector(cfg.model)


def _ops(model):
    from ckptzoo.ops import Conv2dRFSearchOp
    return [n for n, m in model.named_modules() if isinstance(m, Conv2dRFSearchOp)]


def _hook_entry(cfg):
    return next(h for h in cfg.custom_hooks if 'mode' in h)


def test_the_15_rfnext_configs_are_found():
    assert len(CONFIGS) == 15 and len(SEARCH) == 5 and len(FIXED) == 10
    assert NO_HOOK_TYPE <= set(FIXED)


@pytest.mark.parametrize('name', CONFIGS)
def test_rfnext_config_builds_on_meta(name):
    assert try_build(osp.join(ROOT, name)) is None


@pytest.mark.parametrize('name', CONFIGS)
def test_rfnext_config_passes_the_config_check(name, tmp_path):
    """The search configs pass; the fixed ones are refused there, before anything is built or
    written, while their search_log file is missing, and pass once it is given."""
    from ckptzoo.apis.config import check_config, load_config
    cfg = load_config(osp.join(ROOT, name))
    if name in NO_HOOK_TYPE:
        with pytest.raises(KeyError, match='a hook config needs a "type" key'):
            check_config(cfg)
        return
    if name in FIXED:
        with pytest.raises(FileNotFoundError, match=r"'\./configs/rfnext/search_log/.*' does "
                                                    r"not exist.*mode='search'"):
            check_config(cfg)
        path = tmp_path / 'local_search_config_step11.json'
        path.write_text(json.dumps(dict(search={}, structure={})))
        _hook_entry(cfg).rfstructure_file = str(path)
    check_config(cfg)


@pytest.mark.parametrize('name', SEARCH)
def test_search_config_wraps_the_convs_and_keeps_the_units(name, tmp_path):
    from ckptzoo.runner.hooks import RFSearchHook, rfnext_init_model
    cfg = _cfg(name)
    _hook_entry(cfg).verbose = False
    model = _meta_model(cfg)
    units = model.checkpoint_units()
    hook = rfnext_init_model(model, cfg)
    assert isinstance(hook, RFSearchHook) and hook.mode == 'search'
    ops = _ops(model)
    assert len(ops) > 10 and model.checkpoint_units() == units
    skip = hook.config['search']['skip_layer']
    assert not any(s in f'module.{n}' for n in ops for s in skip)
    model.extract_feat(torch.empty(1, 3, 64, 64, device='meta'))


@pytest.mark.parametrize('name', [n for n in FIXED if n not in NO_HOOK_TYPE])
def test_fixed_config_refuses_the_missing_search_log_and_takes_a_searched_json(name, tmp_path):
    from ckptzoo.runner.hooks import rfnext_init_model
    cfg = _cfg(name)
    entry = _hook_entry(cfg)
    entry.verbose = False
    assert entry.rfstructure_file.startswith('./configs/rfnext/search_log/')
    with pytest.raises(FileNotFoundError, match=r"rfstructure_file '\./configs/rfnext/"
                                                r"search_log/.*' does not exist.*mode='search'"):
        rfnext_init_model(_meta_model(cfg), cfg)

    # the JSON the search variant writes (its layer names; rates as a search may leave them)
    search_cfg = _cfg(name.replace('fixed_single_branch', 'search')
                      .replace('fixed_multi_branch', 'search'))
    _hook_entry(search_cfg).verbose = False
    searched = _meta_model(search_cfg)
    hook = rfnext_init_model(searched, search_cfg)
    structure = {f'module.{n}': [1 + i % 3, 1 + i % 2] for i, n in enumerate(_ops(searched))}
    path = tmp_path / 'local_search_config_step11.json'
    path.write_text(json.dumps(dict(search=hook.config['search'], structure=structure)))

    entry.rfstructure_file = str(path)
    model = _meta_model(cfg)
    units = model.checkpoint_units()
    rfnext_init_model(model, cfg)
    assert entry.rfstructure_file is None and model.checkpoint_units() == units
    modules = dict(model.named_modules())
    for key, rate in structure.items():
        layer = modules[key[len('module.'):]]
        if 'single' in name:
            assert layer.dilation == tuple(rate)
        else:
            assert layer.op_layer.dilation == tuple(rate) and len(layer.dilation_rates) > 1
    assert (_ops(model) == []) == ('single' in name)
    model.extract_feat(torch.empty(1, 3, 64, 64, device='meta'))
