"""RFSearchHook (mmcv 1.7's RF-Next): which convs it wraps or sets, the search steps and the
JSON they write (mmcv's layer names and format), the fixed modes from that JSON, the errors,
checkpoint modes exact with the searchable ops inside checkpoint units, and a tiny detector
trained through ``train_model``: a search, then a fixed single-branch run from its JSON."""
import copy
import json
import logging
import os.path as osp

import pytest
import torch
from mmengine.config import Config

from ckptzoo.models import ResNet
from ckptzoo.ops import Conv2dRFSearchOp
from ckptzoo.registry import build_hook
from ckptzoo.runner.hooks import RFSearchHook, rfnext_init_model
from tests.helpers.checkpointing import assert_same_run, run_once
from tests.helpers.hook_fakes import FakeRunner

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SEARCH = dict(step=0, max_step=12, search_interval=1, exp_rate=0.5, init_alphas=0.01, mmin=1,
              mmax=24, num_branches=2, skip_layer=[])


def _resnet(**kwargs):
    torch.manual_seed(0)
    return ResNet(depth=18, base_channels=8, norm_eval=False, zero_init_residual=False,
                  **kwargs).train()


def _hook(mode='search', **search):
    return RFSearchHook(mode, config=dict(search=dict(SEARCH, **search)), verbose=False)


def _ops(model):
    return [n for n, m in model.named_modules() if isinstance(m, Conv2dRFSearchOp)]


def _search_json(tmp_path, steps=2, **search):
    """The JSON a search of ``steps`` steps writes on the tiny ResNet (random branch weights)."""
    model, hook = _resnet(), _hook(**search)
    hook.init_model(model)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        for name, p in model.named_parameters():
            if name.endswith('branch_weights'):
                with torch.no_grad():
                    p.copy_(torch.rand(p.shape, generator=gen) * 3)
        hook.step(model, str(tmp_path))
    return model, str(tmp_path / f'local_search_config_step{steps}.json')


def test_search_wraps_every_odd_kernel_conv_with_mmcvs_keys():
    model = _resnet()
    plain_keys = list(model.state_dict())
    _hook().init_model(model)
    ops = _ops(model)
    # the 7x7 stem and every 3x3 of the 8 basic blocks; the 1x1 downsamples stay
    assert len(ops) == 17 and ops[0] == 'conv1' and 'layer1.0.conv2' in ops
    assert not any('downsample' in n for n in ops)
    keys = list(model.state_dict())
    assert 'layer1.0.conv1.op_layer.weight' in keys and 'layer1.0.conv1.branch_weights' in keys
    assert [k.replace('.op_layer', '') for k in keys if 'branch_weights' not in k] == plain_keys


def test_skip_layer_leaves_the_named_subtrees_alone():
    model = _resnet()
    _hook(skip_layer=['conv1', 'layer1']).init_model(model)
    # names are matched as mmcv writes them, 'module.<path>': 'conv1' skips layerN.M.conv1 too
    assert _ops(model) == [f'layer{i}.{j}.conv2' for i in (2, 3, 4) for j in (0, 1)]


def test_steps_write_mmcvs_json_every_interval_until_max_step(tmp_path):
    model, hook = _resnet(), _hook(search_interval=2, max_step=5)
    hook.init_model(model)
    for _ in range(6):
        hook.step(model, str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        'local_search_config_step2.json', 'local_search_config_step4.json']
    with open(tmp_path / 'local_search_config_step4.json') as f:
        content = json.load(f)
    assert list(content) == ['search', 'structure'] and content['search']['step'] == 4
    assert list(content['structure']) == [f'module.{n}' for n in _ops(model)]
    # equal weights: the mean of 1 and 2 rounds to 2 (half to even), then 1 and 3 give 2
    assert all(v == [2, 2] for v in content['structure'].values())
    assert hook.config['search']['step'] == 6 and SEARCH['step'] == 0  # the config is copied


def test_estimated_rates_follow_the_branch_weights(tmp_path):
    model, path = _search_json(tmp_path, steps=3)
    with open(path) as f:
        structure = json.load(f)['structure']
    rates = {tuple(v) for v in structure.values()}
    assert len(rates) > 1 and all(1 <= r[0] <= 24 for r in rates)
    for name, op in zip(_ops(model), (m for m in model.modules()
                                      if isinstance(m, Conv2dRFSearchOp))):
        assert list(op.op_layer.dilation) == structure[f'module.{name}']
        assert op.dilation_rates == op._rates_around(op.op_layer.dilation)


def test_the_runner_calls_it_by_epoch_or_by_iteration(tmp_path):
    for by_epoch, expected in ((True, 2), (False, 6)):
        model, hook = _resnet(), _hook(max_step=100)
        hook.by_epoch = by_epoch
        hook.init_model(model)
        runner = FakeRunner(tmp_path / str(by_epoch), model=model)
        (tmp_path / str(by_epoch)).mkdir()
        runner.register_hook(hook)
        runner.run_epochs([0, 1, 2], 2)
        assert hook.config['search']['step'] == expected


def test_fixed_single_branch_sets_the_searched_dilations(tmp_path):
    searched, path = _search_json(tmp_path)
    model = _resnet()
    keys = list(model.state_dict())
    RFSearchHook('fixed_single_branch', config=dict(search=SEARCH), rfstructure_file=path,
                 verbose=False).init_model(model)
    assert not _ops(model) and list(model.state_dict()) == keys
    ops = dict(searched.named_modules())
    for name in _ops(searched):
        conv = dict(model.named_modules())[name]
        assert conv.dilation == ops[name].op_layer.dilation
        assert conv.padding == ops[name].get_padding(conv.dilation)
    assert model.layer1[0].conv1.dilation != (1, 1) or model.layer2[0].conv1.dilation != (1, 1)


def test_fixed_multi_branch_branches_around_the_searched_dilations(tmp_path):
    searched, path = _search_json(tmp_path)
    model = _resnet()
    RFSearchHook('fixed_multi_branch', config=dict(search=SEARCH), rfstructure_file=path,
                 verbose=False).init_model(model)
    assert _ops(model) == _ops(searched)
    theirs = dict(searched.named_modules())
    for name, op in model.named_modules():
        if isinstance(op, Conv2dRFSearchOp):
            assert op.op_layer.dilation == theirs[name].op_layer.dilation
            assert op.dilation_rates == theirs[name].dilation_rates
    runner = FakeRunner(tmp_path / 'run', model=model)
    (tmp_path / 'run').mkdir()
    hook = RFSearchHook('fixed_multi_branch', config=dict(search=SEARCH), rfstructure_file=path)
    runner.register_hook(hook)
    runner.run_epochs([0], 2)  # the fixed modes never move the rates nor write
    assert not list((tmp_path / 'run').iterdir())


def test_bad_input_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="mode must be one of search, fixed_single_branch, "
                                         "fixed_multi_branch, got 'fixed'"):
        RFSearchHook('fixed', config=dict(search=SEARCH))
    missing = str(tmp_path / 'search_log' / 'local_search_config_step11.json')
    with pytest.raises(FileNotFoundError, match=r"rfstructure_file '.*local_search_config_step11"
                                                r"\.json' does not exist.*mode='search'"):
        RFSearchHook('fixed_single_branch', config=dict(search=SEARCH),
                     rfstructure_file=missing)
    with pytest.raises(ValueError, match="mode='fixed_multi_branch' needs rfstructure_file"):
        RFSearchHook('fixed_multi_branch', config=dict(search=SEARCH))
    with pytest.raises(KeyError, match='config.search lacks max_step'):
        RFSearchHook(config=dict(search={k: v for k, v in SEARCH.items() if k != 'max_step'}))
    with pytest.raises(TypeError, match='config must be dict'):
        RFSearchHook()
    with pytest.raises(ValueError, match="num_branches'\\] must be 2 or 3, got 5"):
        _hook(num_branches=5)
    other = tmp_path / 'other.json'
    other.write_text(json.dumps(dict(search=SEARCH, structure={'module.conv1': [2, 2]})))
    hook = RFSearchHook('fixed_single_branch', config=dict(search=SEARCH),
                        rfstructure_file=str(other), verbose=False)
    with pytest.raises(KeyError, match="no dilation for 'module.layer1.0.conv1'"):
        hook.init_model(_resnet())


def test_a_runner_model_without_ops_is_warned_about(tmp_path):
    runner = FakeRunner(tmp_path, model=_resnet())
    runner.register_hook(_hook())
    runner.call_hook('before_run')
    assert any('has no Conv2dRFSearchOp' in m for m in runner.log_handler.messages)


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('rf_mode', ['search', 'fixed_multi_branch'])
def test_every_checkpoint_mode_is_exact_with_the_searchable_ops(mode, rf_mode, tmp_path):
    torch.manual_seed(0)  # the searched rates and weights do not depend on the tests before
    _, path = _search_json(tmp_path)
    models = []
    for _ in range(2):
        model = _resnet()
        units = model.checkpoint_units()
        RFSearchHook(rf_mode, config=dict(search=SEARCH),
                     rfstructure_file=path if rf_mode != 'search' else None,
                     verbose=False).init_model(model)
        assert model.checkpoint_units() == units  # the blocks holding the ops are the units
        models.append(model)
    plain, ckpt = models
    with torch.no_grad():
        for name, p in plain.named_parameters():
            if name.endswith('branch_weights'):
                p.uniform_(0.1, 2.0)
    ckpt.load_state_dict(plain.state_dict())
    ckpt.set_checkpoint_plan({'*': mode})
    # 128 px: layer4's map (4 x 4) is wider than the dilations, so the branches differ and
    # every branch weight gets a gradient (on a 1 x 1 map all branches see the centre alone)
    x = torch.randn(2, 3, 128, 128, requires_grad=True)
    ref = run_once(plain, x, seed=0)
    plain.load_state_dict(ckpt.state_dict())  # the BN statistics before the second pass
    assert_same_run(ref, run_once(ckpt, x, seed=0), ckpt)


# ---- a tiny detector trained through the project's train API ----

def _rfnext_cfg(root, work_dir, **hook):
    cfg = Config.fromfile(osp.join(ROOT, 'configs/coco/retinanet_r18_fpn_synthetic_coco_cp.py'))
    cfg.model.backbone.update(base_channels=8, with_cp=False)
    cfg.model.neck.update(in_channels=[8, 16, 32, 64], out_channels=16)
    cfg.model.bbox_head.update(in_channels=16, feat_channels=16, stacked_convs=1)
    for t in cfg.data.train.pipeline:
        if t['type'] == 'Resize':
            t.update(img_scale=[(64, 64)], multiscale_mode='value')
    cfg.data.train.update(ann_file=osp.join(root, 'annotations/instances_train2017.json'),
                          img_prefix=osp.join(root, 'train2017/'))
    cfg.data.update(samples_per_gpu=2, workers_per_gpu=0)
    cfg.pop('synthetic_data')
    cfg.work_dir = work_dir
    cfg.evaluation = None
    cfg.checkpoint_config = dict(interval=1)
    cfg.log_config = dict(interval=1, hooks=[dict(type='TextLoggerHook')])
    cfg.lr_config = dict(policy='fixed')
    cfg.optimizer = dict(type='SGD', lr=0.01, momentum=0.9)
    cfg.runner = dict(type='EpochBasedRunner', max_epochs=2)
    cfg.custom_hooks = [dict(type='NumClassCheckHook'), dict(
        type='RFSearchHook', verbose=True, by_epoch=True,
        config=dict(search=dict(SEARCH, max_step=3, skip_layer=['stem'])), **hook)]
    cfg.seed = 0
    return cfg


@pytest.mark.slow
def test_search_then_fixed_single_branch_through_train_model(tmp_path):
    from ckptzoo.apis import init_detector, set_random_seed
    from ckptzoo.apis.train import build_train_datasets, build_train_model, train_model
    from ckptzoo.datasets import generate_coco
    from ckptzoo.datasets.synthetic_voc import SYNTHETIC_CLASSES
    root = generate_coco(str(tmp_path / 'coco'), num_train=4, num_val=2, img_size=(64, 64),
                         classes=SYNTHETIC_CLASSES, seed=0)
    logger = logging.getLogger('ckptzoo.test.rfsearch')

    cfg = _rfnext_cfg(root, str(tmp_path / 'search'), mode='search', rfstructure_file=None)
    saved_cfg = copy.deepcopy(cfg)
    set_random_seed(0)
    model = build_train_model(cfg)
    assert len(_ops(model)) > 0 and 'backbone.layer1.0.conv1' in _ops(model)
    runner = train_model(model, build_train_datasets(cfg), cfg, logger=logger)
    hook = next(h for h in runner.hooks if isinstance(h, RFSearchHook))
    assert hook.config['search']['step'] == 2  # two epochs: steps 1 and 2 (< max_step 3)
    written = sorted(p.name for p in (tmp_path / 'search').glob('local_search_config_*.json'))
    assert written == ['local_search_config_step1.json', 'local_search_config_step2.json']
    path = str(tmp_path / 'search' / 'local_search_config_step2.json')
    with open(path) as f:
        structure = json.load(f)['structure']
    assert list(structure) == [f'module.{n}' for n in _ops(model)]
    assert all(v > 0 for p in model.parameters() for v in p.abs().sum().reshape(1))

    # the search's checkpoint loads strictly into the model the search config builds
    detector = init_detector(saved_cfg, str(tmp_path / 'search' / 'epoch_2.pth'), device='cpu')
    assert _ops(detector) == _ops(model)
    # and tools/test.py evaluates it (it prepares the model as mmdet's test.py does)
    from tests.helpers.tools import load_tool
    saved_cfg.data.test.update(ann_file=osp.join(root, 'annotations/instances_val2017.json'),
                               img_prefix=osp.join(root, 'val2017/'))
    saved_cfg.evaluation = dict(interval=1, metric='bbox')
    saved_cfg.dump(str(tmp_path / 'rfnext_search.py'))
    load_tool('test.py').main([str(tmp_path / 'rfnext_search.py'),
                               str(tmp_path / 'search' / 'epoch_2.pth'), '--eval', 'bbox'])

    cfg = _rfnext_cfg(root, str(tmp_path / 'fixed'), mode='fixed_single_branch',
                      rfstructure_file=path)
    set_random_seed(0)
    model = build_train_model(cfg)
    assert not _ops(model) and cfg.custom_hooks[1].rfstructure_file is None
    modules = dict(model.named_modules())
    for name, rate in structure.items():
        assert list(modules[name[len('module.'):]].dilation) == rate
    train_model(model, build_train_datasets(cfg), cfg, logger=logger)
    assert not list((tmp_path / 'fixed').glob('local_search_config_*.json'))

    cfg = _rfnext_cfg(root, str(tmp_path / 'missing'), mode='fixed_single_branch',
                      rfstructure_file='./configs/rfnext/search_log/x/local_search_config_'
                                       'step11.json')
    with pytest.raises(FileNotFoundError, match='search_log/x/local_search_config_step11.json'):
        build_train_model(cfg)
    assert not (tmp_path / 'missing').exists()  # refused before anything was written


def test_rfnext_init_model_reads_the_custom_hooks():
    model = _resnet()
    assert rfnext_init_model(model, Config(dict(custom_hooks=[dict(type='NumClassCheckHook')])))\
        is None and not _ops(model)
    cfg = Config(dict(custom_hooks=[dict(type='RFSearchHook',
                                         config=dict(search=SEARCH))]))
    hook = rfnext_init_model(model, cfg)
    assert hook.mode == 'search' and len(_ops(model)) == 17
    # the runner's hook is built from the same entry
    assert isinstance(build_hook(dict(cfg.custom_hooks[0])), RFSearchHook)


@pytest.mark.slow
def test_a_resumed_search_continues_where_it_stood(tmp_path):
    """mmcv restarts a resumed search at the config's step with the initial rates; here the
    checkpoint's ``meta['rfsearch']`` restores them and the step that ran after the save, so
    the resumed run's rates, JSON and weights equal the uninterrupted run's."""
    from ckptzoo.apis import set_random_seed
    from ckptzoo.apis.train import build_train_datasets, build_train_model, train_model
    from ckptzoo.datasets import generate_coco
    from ckptzoo.datasets.synthetic_voc import SYNTHETIC_CLASSES
    from ckptzoo.runner.checkpoint import load_file
    root = generate_coco(str(tmp_path / 'coco'), num_train=4, num_val=0, img_size=(64, 64),
                         classes=SYNTHETIC_CLASSES, seed=0)
    logger = logging.getLogger('ckptzoo.test.rfsearch')

    def run(name, **extra):
        cfg = _rfnext_cfg(root, str(tmp_path / name), mode='search', rfstructure_file=None)
        cfg.custom_hooks[1].config.search.max_step = 10
        cfg.custom_hooks[1].verbose = False
        cfg.runner.max_epochs = 3
        cfg.update(extra)
        set_random_seed(0)
        model = build_train_model(cfg)
        return train_model(model, build_train_datasets(cfg), cfg, logger=logger)

    whole = run('whole')
    first = load_file(str(tmp_path / 'whole' / 'epoch_1.pth'), 'cpu')
    assert first['meta']['rfsearch']['step'] == 0  # saved before the epoch's search step
    resumed = run('resumed', resume_from=str(tmp_path / 'whole' / 'epoch_1.pth'))
    for step in (2, 3):
        name = f'local_search_config_step{step}.json'
        assert (tmp_path / 'resumed' / name).read_text() == (tmp_path / 'whole' / name).read_text()
    rates = [[m.dilation_rates for m in r.model.modules() if isinstance(m, Conv2dRFSearchOp)]
             for r in (whole, resumed)]
    assert rates[0] == rates[1]
    theirs = whole.model.state_dict()
    for key, value in resumed.model.state_dict().items():
        torch.testing.assert_close(value, theirs[key], rtol=0, atol=1e-6, msg=key)


def test_the_config_check_builds_the_hook_once():
    """``check_config`` (tools/train.py, before anything is written) refuses a bad hook."""
    from ckptzoo.apis.config import check_config
    from ckptzoo.apis.config.schema import ConfigError
    hooks = [dict(type='NumClassCheckHook'),
             dict(type='RFSearchHook', mode='searching', config=dict(search=SEARCH))]
    with pytest.raises(ConfigError, match=r"custom_hooks\[1\]: RFSearchHook mode must be one of "
                                          r".*got 'searching'"):
        check_config(Config(dict(custom_hooks=hooks)))
    hooks[1]['mode'] = 'search'
    check_config(Config(dict(custom_hooks=hooks)))
