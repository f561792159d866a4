"""ckptzoo.apis.config: a config file that cannot load names itself, and a key nothing reads or
a value that would fail late fails naming the key, before anything is built."""
import copy
import os.path as osp
import re
import warnings

import pytest
from mmengine.config import Config

from ckptzoo.apis.config import ConfigError, check_config, load_config
from ckptzoo.registry import UnknownKeyError, UnknownTypeError, accepted_args

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SMOKE = osp.join(ROOT, 'configs', 'smoke', 'classifier_synthetic.py')
VOC = osp.join(ROOT, 'configs', 'voc', 'retinanet_r50_fpn_1x_voc0712.py')


@pytest.fixture(scope='module')
def smoke():
    return Config.fromfile(SMOKE)


def _write(path, text):
    path.write_text(text)
    return str(path)


# -- loading ---------------------------------------------------------------------------------
def test_syntax_error_names_the_file_and_line(tmp_path):
    bad = _write(tmp_path / 'bad.py', 'x = 1\ny = dict(a=1\n')
    with pytest.raises(SyntaxError) as info:
        load_config(bad)
    assert info.value.filename == bad and info.value.lineno == 2  # mmengine: '<unknown>'
    assert bad in str(info.value)


def test_syntax_error_in_a_base_file_names_it_and_its_includer(tmp_path):
    base = _write(tmp_path / 'base.py', 'a = dict(x=1\n')
    main = _write(tmp_path / 'main.py', "_base_ = ['./base.py']\nb = 2\n")
    with pytest.raises(SyntaxError, match=re.escape(f'{base} (a _base_ of {main})')) as info:
        load_config(main)
    assert info.value.filename == base and info.value.lineno == 1


def test_error_raised_by_a_base_file_names_it_and_the_line(tmp_path):
    base = _write(tmp_path / 'base.py', 'a = 1\nb = undefined + 1\n')
    main = _write(tmp_path / 'main.py', "_base_ = ['./base.py']\n")
    with pytest.raises(ConfigError, match=re.escape(f'{base}, line 2 (a _base_ of {main}): '
                                                    "NameError: name 'undefined'")):
        load_config(main)


def test_missing_config_or_base_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="config file '.*nope.py' not found"):
        load_config(str(tmp_path / 'nope.py'))
    main = _write(tmp_path / 'main.py', "_base_ = ['./missing_base.py']\n")
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"_base_ file '{tmp_path / 'missing_base.py'}' not found (named in {main})")):
        load_config(main)


def test_an_import_mmengine_does_not_allow_names_the_module_and_what_to_do(tmp_path):
    """mmengine: "The configuration file type in the inheritance chain must match ... lazy_import",
    naming neither the file nor the import."""
    _write(tmp_path / 'base.py', "model = dict(type='ToyRegressor')\n")
    cfg = _write(tmp_path / 'cfg.py', "import math\nimport os\n_base_ = ['./base.py']\n"
                 "work_dir = os.path.join('runs', 'a')\n")
    with pytest.raises(ConfigError, match=rf"config file {re.escape(cfg)}, line 2: 'import os': "
                                          r"a config with _base_ can only import modules that "
                                          r"mmengine counts as standard library, and it does "
                                          r"not count 'os' .* Write the value itself"):
        load_config(cfg)


def test_a_base_cycle_names_its_files(tmp_path):
    """a.py -> b.py -> a.py: was a RecursionError after mmengine's deep recursion."""
    (tmp_path / 'sub').mkdir()
    a = _write(tmp_path / 'a.py', "_base_ = ['./sub/b.py']\nx = 1\n")
    b = _write(tmp_path / 'sub' / 'b.py', "_base_ = '../a.py'\ny = 1\n")
    with pytest.raises(ConfigError, match=rf'_base_ files form a cycle: {re.escape(a)} -> '
                                          rf'{re.escape(b)} -> {re.escape(a)}: '):
        load_config(a)
    _write(tmp_path / 'sub' / 'b.py', "y = 1\n")  # a chain is no cycle
    c = _write(tmp_path / 'c.py', "_base_ = ['./a.py']\n")
    assert load_config(c).y == 1


def test_cfg_options_top_level_typo_fails_with_close_match():
    with pytest.raises(UnknownKeyError, match=r"unknown config key 'runer' \(from --cfg-options "
                       r"runer.max_epochs\).*did you mean 'runner'\?"):
        load_config(SMOKE, {'runer.max_epochs': 1})
    with pytest.raises(UnknownKeyError, match="unknown config key 'no_such_setting'"):
        load_config(SMOKE, {'no_such_setting': 1})
    cfg = load_config(SMOKE, {'runner.max_epochs': 1, 'optimizer.lr': 0.5, 'memory_budget': 1e9})
    assert cfg.runner.max_epochs == 1 and cfg.optimizer.lr == 0.5


def test_cfg_options_cannot_override_a_file_variable():
    """``img_norm_cfg`` was already used where the file refers to it: changing it is a no-op."""
    with pytest.raises(ConfigError, match="'img_norm_cfg' is a variable of the config file"):
        load_config(VOC, {'img_norm_cfg.mean': [0, 0, 0]})


def test_variables_in_the_file_are_accepted_and_near_misses_warned(tmp_path):
    path = _write(tmp_path / 'c.py', f"_base_ = ['{SMOKE}']\nmy_classes = ('a', 'b')\n"
                  "evalution = dict(interval=2)\n")
    cfg = load_config(path)
    with pytest.warns(UserWarning, match="'evalution' in .*c.py is not read.*did you mean "
                      "'evaluation'"):
        check_config(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        check_config(load_config(SMOKE))


TYPOS = {'runer': 'runner', 'optimzer': 'optimizer', 'lr_confg': 'lr_config',
         'worklfow': 'workflow', 'checkpoint_confg': 'checkpoint_config',
         'evalution': 'evaluation'}
VARIABLES = ('data_root', 'img_norm_cfg', 'train_pipeline', 'test_pipeline', 'dataset_type',
             'classes', 'img_scale', 'norm_cfg', 'pretrained', 'checkpoint', 'file_client_args')


def test_a_top_level_typo_in_the_file_is_warned_naming_the_file_and_the_key(tmp_path):
    """``runer = dict(max_epochs=1)`` trained all epochs of the base: the warning names the key,
    the file that sets it (the config or its _base_) and the key it probably meant; the
    variables of mmdet configs stay silent."""
    base = _write(tmp_path / 'base.py', f"_base_ = ['{SMOKE}']\nworklfow = [('train', 1)]\n")
    lines = [f"_base_ = ['./base.py']"] + [f'{k} = dict(x=1)' for k in TYPOS if k != 'worklfow']
    path = _write(tmp_path / 'typos.py', '\n'.join(lines + [f'{v} = 1' for v in VARIABLES]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        check_config(load_config(path))
    messages = sorted(str(w.message) for w in caught)
    assert messages == sorted(
        f"config key {typo!r} in {base if typo == 'worklfow' else path} is not read by "
        f"ckptzoo, so its value is ignored (unless it is a variable that other keys use); did "
        f"you mean {known!r}?" for typo, known in TYPOS.items())


def test_no_variable_of_mmdet_config_files_is_a_near_miss():
    """The rule (one edit, or difflib ratio >= 0.85) on every top-level name of mmdet 2.28.2's
    config files (read with ast, not run)."""
    import ast
    import glob
    import importlib.util
    from ckptzoo.apis.config import KNOWN_KEYS, near_miss
    spec = importlib.util.find_spec('mmdet')
    if spec is None:
        pytest.skip('mmdet 2.28.2 (its config files) is not installed')
    files = glob.glob(osp.join(spec.submodule_search_locations[0], '.mim', 'configs', '**',
                               '*.py'), recursive=True)
    names = {t.id for f in files for node in ast.parse(open(f).read()).body
             if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}
    assert len(files) > 600 and {'data_root', 'img_norm_cfg', 'checkpoint'} <= names
    assert {n: near_miss(n) for n in names - KNOWN_KEYS if near_miss(n)} == {}
    assert {t: near_miss(t) for t in TYPOS} == TYPOS


# -- checking --------------------------------------------------------------------------------
@pytest.mark.parametrize('key, value, error, message', [
    ('data.samples_per_gpus', 2, UnknownKeyError,
     r"'data.samples_per_gpus' \(did you mean 'data.samples_per_gpu'"),
    ('data.samples_per_gpu', '2', ConfigError, "data.samples_per_gpu must be a positive int, "
                                               "got '2'"),
    ('data.samples_per_gpu', 0, ConfigError, 'data.samples_per_gpu must be a positive int'),
    ('data.samples_per_gpu', True, ConfigError, 'positive int, got True'),
    ('data.workers_per_gpu', -1, ConfigError, 'data.workers_per_gpu must be a non-negative int'),
    ('data.val.samples_per_gpu', 0, ConfigError, 'data.val.samples_per_gpu must be a positive'),
    ('data.train_dataloader', dict(samples_per_gpu=2.0), ConfigError,
     'data.train_dataloader.samples_per_gpu must be a positive int, got 2.0'),
    ('data.train_dataloader', dict(shufle=False), UnknownKeyError,
     r"'data.train_dataloader.shufle' \(did you mean 'data.train_dataloader.shuffle'"),
    ('data.train.num_sample', 8, UnknownKeyError,
     r"'data.train.num_sample' \(did you mean 'data.train.num_samples'.*"
     'allowed by SyntheticClassificationDataset'),
    ('data.imgs_per_gpu', 2, ConfigError, 'mmdet 1.x name of data.samples_per_gpu'),
    ('lr_config.step', [3, 1], ConfigError, r'lr_config: step must be .*strictly increasing.*'
                                            r'got \[3, 1\]'),
    ('lr_config.stepp', [3], UnknownKeyError, r"'lr_config.stepp' \(did you mean "
                                              r"'lr_config.step'"),
    ('lr_config.policy', 'cosine_annealing', ConfigError, "unknown lr_config policy"),
    ('momentum_config', dict(policy='step', step=[4, 2]), ConfigError,
     'momentum_config: step must'),
    ('checkpoint_config.max_keep_ckpt', 1, ConfigError,
     r"checkpoint_config: .*'max_keep_ckpt' \(did you mean 'max_keep_ckpts'"),
    ('checkpoint_config.interval', 0, ConfigError, 'checkpoint_config: interval must be'),
    ('evaluation.metric', 'bbox', ValueError,
     "evaluation.metric 'bbox' is not a metric of SyntheticClassificationDataset: allowed "
     "'accuracy'"),
    ('evaluation.save_bset', 'auto', UnknownKeyError, "did you mean 'evaluation.save_best'"),
    ('runner.max_epoch', 3, UnknownKeyError, "did you mean 'runner.max_epochs'"),
    ('optimizer.lrr', 0.1, UnknownKeyError, r"'optimizer.lrr' \(did you mean 'optimizer.lr'"),
    ('optimizer.paramwise_cfg', dict(norm_decay=0.), UnknownKeyError,
     "did you mean 'optimizer.paramwise_cfg.norm_decay_mult'"),
    ('optimizer_config.grad_clipp', None, UnknownKeyError, "did you mean "
                                                           "'optimizer_config.grad_clip'"),
    ('optimizer_config.cumulative_iters', 0, ConfigError, 'optimizer_config: cumulative_iters'),
    ('fp16.loss_scal', 512., UnknownKeyError, "did you mean 'fp16.loss_scale'"),
    ('fp16.loss_scale', 'dynamc', ConfigError, 'optimizer_config: loss_scale must be'),
    ('model.backbone.with_cpp', True, UnknownKeyError,
     r"'model.backbone.with_cpp' \(did you mean 'model.backbone.with_cp'.*allowed by ResNet: "),
    ('model.type', 'ImageClasifier', UnknownTypeError, "did you mean ImageClassifier"),
    ('log_config.hooks', [dict(type='TextLoggerHook', intervl=5)], UnknownKeyError,
     "did you mean 'log_config.hooks.0.interval'"),
    ('custom_hooks', [dict(type='EMAHook', momentm=0.1, priority='ABOVE_NORMAL')],
     UnknownKeyError, "did you mean 'custom_hooks.0.momentum'"),
    ('auto_scale_lr.base_batch', 16, UnknownKeyError, "did you mean "
                                                      "'auto_scale_lr.base_batch_size'"),
    ('dist_params.backed', 'gloo', UnknownKeyError, "did you mean 'dist_params.backend'"),
    ('synthetic_data', dict(root='x', num_trainvl=4), UnknownKeyError,
     "did you mean 'synthetic_data.num_trainval'"),
])
def test_check_names_the_bad_key(smoke, key, value, error, message):
    cfg = copy.deepcopy(smoke)
    cfg.merge_from_dict({key: value})
    with pytest.raises(error, match=message.replace('hooks.0', r'hooks\[0\]')):
        check_config(cfg)


def test_check_follows_wrappers_lists_and_pipelines():
    cfg = Config.fromfile(VOC)
    check_config(cfg)
    bad = copy.deepcopy(cfg)
    bad.data.train.tims = 3  # RepeatDataset(times=...)
    with pytest.raises(UnknownKeyError, match=r"'data.train.tims' \(did you mean "
                       r"'data.train.times'\?\); allowed by RepeatDataset: dataset, times"):
        check_config(bad)
    bad = copy.deepcopy(cfg)
    bad.data.train.dataset.pipeline[2].img_scal = (1000, 600)  # inside RepeatDataset
    with pytest.raises(UnknownKeyError, match=re.escape(
            "'data.train.dataset.pipeline[2].img_scal' (did you mean "
            "'data.train.dataset.pipeline[2].img_scale'")):
        check_config(bad)
    bad = copy.deepcopy(cfg)
    bad.data.test.pipeline[1].transforms[0].type = 'Resise'  # inside MultiScaleFlipAug
    with pytest.raises(UnknownTypeError, match="unknown transform type 'Resise'"):
        check_config(bad)
    bad = copy.deepcopy(cfg)
    bad.model.bbox_head.anchor_generator.octave_base_scal = 4
    with pytest.raises(UnknownKeyError, match="'model.bbox_head.anchor_generator.octave_base_scal"
                       "' .*allowed by AnchorGenerator"):
        check_config(bad)
    bad = copy.deepcopy(cfg)
    bad.evaluation.iou_thrs = [0.5]  # CocoDataset's name; VOC (two datasets) takes iou_thr
    with pytest.raises(UnknownKeyError, match="did you mean 'evaluation.iou_thr'"):
        check_config(bad)
    bad.evaluation.pop('iou_thrs')
    bad.evaluation.metric = 'bbox'
    with pytest.raises(ValueError, match="'bbox' is not a metric of VOCDataset: allowed 'mAP'"):
        check_config(bad)
    check_config(bad, validate=False)  # --no-validate: evaluation is not used


def test_evaluation_keys_of_the_distributed_hook():
    cfg = Config.fromfile(SMOKE)
    cfg.evaluation.gpu_collect = True  # DistEvalHook's
    check_config(cfg, distributed=True)
    with pytest.raises(UnknownKeyError, match="'evaluation.gpu_collect'"):
        check_config(cfg)  # EvalHook would pass it to dataset.evaluate


def test_accepted_args_follow_kwargs_to_the_base_class():
    from ckptzoo.registry import HOOKS, MODELS
    assert {'groups', 'base_width', 'depth', 'with_cp'} <= accepted_args(MODELS.get('ResNeXt'))
    assert 'warmup_iters' in accepted_args(HOOKS.get('StepLrUpdaterHook'))
    assert accepted_args(HOOKS.get('CheckpointHook')) is None  # checks its **kwargs itself


def test_head_train_and_test_cfg_keys():
    """The head reads fixed keys of train_cfg / test_cfg: a typo failed silently in mmdet."""
    from ckptzoo.registry import build_model
    cfg = Config.fromfile(VOC)
    cfg.model.test_cfg.score_thrs = 0.5
    with pytest.raises(UnknownKeyError, match=r"'test_cfg.score_thrs' \(did you mean "
                       r"'test_cfg.score_thr'\?\); allowed by RetinaHead"):
        build_model(cfg.model)


def test_custom_imports_of_mmcls_models_is_ckptzoos_own(tmp_path):
    """mmdet's ConvNeXt configs import ``mmcls.models`` for ``mmcls.ConvNeXt``: ckptzoo
    registers it, so that import is skipped; any other module is imported as mmengine does."""
    path = tmp_path / 'cfg.py'
    path.write_text("custom_imports = dict(imports=['mmcls.models'], allow_failed_imports=False)\n"
                    "model = dict(type='mmcls.ConvNeXt', arch='tiny')\n")
    assert load_config(str(path)).model.type == 'mmcls.ConvNeXt'
    path.write_text("custom_imports = dict(imports=['mmcls.models', 'no_such_module_x'])\n")
    with pytest.raises(ImportError, match=r'cfg.py: custom_imports .*Failed to import '
                       r'no_such_module_x'):
        load_config(str(path))
    path.write_text("custom_imports = dict(imports='no_such_module_x',\n"
                    "                      allow_failed_imports=True)\n")
    with pytest.warns(UserWarning, match='no_such_module_x failed to import'):
        load_config(str(path))


def test_a_training_config_without_workflow_or_lr_config_names_them():
    """Training reads workflow and lr_config with no default (mmdet's configs take them from
    their _base_): a config without them fails naming them and what to write (it ended in an
    AttributeError from deep inside the run's assembly)."""
    cfg = load_config(SMOKE)
    check_config(cfg, complete=True)
    cfg.pop('workflow')
    cfg.pop('lr_config')
    check_config(cfg)  # the keys it has are fine
    with pytest.raises(ConfigError, match=r"the config has no lr_config, workflow, which "
                       r"training reads: give lr_config = dict\(policy='step', step=\[\.\.\.\]\) "
                       r".*; workflow = \[\('train', 1\)\]"):
        check_config(cfg, complete=True)
