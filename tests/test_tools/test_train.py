"""tools/train.py end to end: smoke config, exact resume in a fresh process, cfg-options."""
import os
import os.path as osp
import re
import subprocess
import sys

import pytest
import torch
from tests.helpers.configs import TOY_CFG
from tests.helpers.tools import load_tool

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TRAIN = osp.join(ROOT, 'tools', 'train.py')

def _run(args, cwd):
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, TRAIN] + args, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _final(work_dir):
    return torch.load(osp.join(work_dir, 'latest.pth'), map_location='cpu', weights_only=True)


RUNNERS = {
    'iter': ("runner = dict(type='IterBasedRunner', max_iters=11)\n", (2, 3, 4, 7)),
    'epoch': ("runner = dict(type='EpochBasedRunner', max_epochs=2)\n", (4, 8, 9, 11)),
}


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize('runner', ['iter', 'epoch'])
def test_resume_in_fresh_process_is_exact(tmp_path, runner):
    runner_line, stops = RUNNERS[runner]
    cfg = tmp_path / 'toy.py'
    cfg.write_text(TOY_CFG + runner_line)
    _run([str(cfg), '--work-dir', str(tmp_path / 'full')], ROOT)
    full = _final(tmp_path / 'full')
    assert full['meta']['iter'] == (11 if runner == 'iter' else 16)
    for r in stops:  # r % 3 covers 0, 1 and 2
        ckpt = tmp_path / 'full' / f'iter_{r}.pth'
        assert torch.load(ckpt, weights_only=True)['meta']['iter'] == r  # completed iterations
        work = tmp_path / f'resumed_{r}'
        _run([str(cfg), '--work-dir', str(work), '--resume-from', str(ckpt)], ROOT)
        resumed = _final(work)
        assert resumed['meta']['iter'] == full['meta']['iter']
        for key, value in full['state_dict'].items():
            torch.testing.assert_close(resumed['state_dict'][key], value, rtol=0, atol=0,
                                       msg=f'{key} after resuming at {r}')
        moved = (full['state_dict']['fc1.weight']
                 - torch.load(ckpt, weights_only=True)['state_dict']['fc1.weight']).abs().max()
        assert moved > 0  # the resumed part really trained


@pytest.mark.slow
@pytest.mark.subprocess
def test_fp16_resume_restores_loss_scaler(tmp_path):
    cfg = tmp_path / 'toy_fp16.py'
    cfg.write_text(TOY_CFG + "runner = dict(type='IterBasedRunner', max_iters=11)\n"
                   "fp16 = dict(loss_scale=dict(init_scale=256., growth_interval=2))\n")
    _run([str(cfg), '--work-dir', str(tmp_path / 'full')], ROOT)
    full = _final(tmp_path / 'full')
    scaler = full['meta']['fp16']['loss_scaler']
    assert scaler['scale'] > 256.  # grew: the state is not the initial one
    ckpt = torch.load(tmp_path / 'full' / 'iter_4.pth', weights_only=True)
    assert ckpt['meta']['fp16']['loss_scaler']['_growth_tracker'] == 1
    _run([str(cfg), '--work-dir', str(tmp_path / 'resumed'), '--resume-from',
          str(tmp_path / 'full' / 'iter_4.pth')], ROOT)
    resumed = _final(tmp_path / 'resumed')
    assert resumed['meta']['fp16']['loss_scaler'] == scaler
    for key, value in full['state_dict'].items():
        torch.testing.assert_close(resumed['state_dict'][key], value, rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.subprocess
def test_smoke_config_end_to_end(tmp_path):
    work = tmp_path / 'smoke'
    proc = _run([osp.join(ROOT, 'configs', 'smoke', 'classifier_synthetic.py'), '--work-dir',
                 str(work), '--cfg-options', 'runner.max_epochs=2'], str(tmp_path))
    log = open(next(str(p) for p in work.glob('*.log'))).read()
    assert 'GradientCumulativeFp16OptimizerHook' in log  # fp16 + cumulative_iters together
    assert 'Epoch(val) [2]' in log and 'accuracy_top-1' in log and 'eta:' in log
    ckpt = _final(work)
    assert ckpt['meta']['epoch'] == 2 and ckpt['meta']['iter'] == 32
    assert ckpt['meta']['fp16']['loss_scaler']['scale'] == 512.
    assert (work / 'classifier_synthetic.py').exists()  # the config dump
    assert list(work.glob('*.log.json'))
    del proc


def _load_train_module():
    return load_tool('train.py')


def test_cfg_options_override_nested_keys_and_lists():
    from mmengine.config import Config
    train = _load_train_module()
    args = train.parse_args([
        osp.join(ROOT, 'configs', 'smoke', 'classifier_synthetic.py'), '--cfg-options',
        'optimizer.lr=0.5', 'model.backbone.out_indices=(2,3)', 'lr_config.step=[2,4]',
        'data.train.num_samples=10', 'optimizer_config.cumulative_iters=4'])
    cfg = Config.fromfile(args.config)
    cfg.merge_from_dict(args.cfg_options)
    assert cfg.optimizer.lr == 0.5 and cfg.optimizer.momentum == 0.9
    assert tuple(cfg.model.backbone.out_indices) == (2, 3)
    assert list(cfg.lr_config.step) == [2, 4]
    assert cfg.data.train.num_samples == 10 and cfg.data.train.img_size == 32
    assert cfg.optimizer_config.cumulative_iters == 4


@pytest.mark.slow
@pytest.mark.subprocess
def test_unknown_hook_and_bad_runner_fail_clearly(tmp_path):
    cfg = tmp_path / 'toy.py'
    cfg.write_text(TOY_CFG + "runner = dict(type='IterBasedRunner', max_iters=2)\n"
                   "custom_hooks = [dict(type='EMAHookk')]\n")
    proc = subprocess.run([sys.executable, TRAIN, str(cfg), '--work-dir', str(tmp_path / 'w')],
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0 and "unknown hook type 'EMAHookk'" in proc.stderr
    cfg.write_text(TOY_CFG + "runner = dict(type='IterBasedRunner', max_iters=2, "
                   "max_epochs=1)\n")
    proc = subprocess.run([sys.executable, TRAIN, str(cfg), '--work-dir', str(tmp_path / 'w')],
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0
    assert 'only one of max_epochs and max_iters can be set' in proc.stderr


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.subprocess
def test_torchrun_launcher_pytorch_on_cpu(tmp_path):
    """`--launcher pytorch` under torchrun: gloo on CPU, DDP, distributed samplers."""
    cfg = tmp_path / 'toy.py'
    cfg.write_text(TOY_CFG + "runner = dict(type='EpochBasedRunner', max_epochs=2)\n"
                   "fp16 = dict(loss_scale='dynamic')\n")
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS='1')
    proc = subprocess.run(
        [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2',
         '--master_port', str(_free_port()), TRAIN, str(cfg), '--work-dir', str(tmp_path / 'ddp'),
         '--launcher', 'pytorch'], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = open(next(str(p) for p in (tmp_path / 'ddp').glob('*.log'))).read()
    assert 'Distributed training: True (world size 2)' in log
    assert 'GradientCumulativeFp16OptimizerHook' in log and 'DistSamplerSeedHook' in log
    ckpt = _final(tmp_path / 'ddp')
    assert ckpt['meta']['epoch'] == 2 and ckpt['meta']['iter'] == 8  # 4 samples per rank
    assert not any(k.startswith('module.') for k in ckpt['state_dict'])


@pytest.mark.subprocess
def test_work_dir_dot_never_overwrites_the_config_or_its_base(tmp_path):
    """`cd cfgdir && train.py mycfg.py --work-dir .`: the merged dump goes to <timestamp>.py."""
    (tmp_path / 'base.py').write_text(TOY_CFG + "runner = dict(type='IterBasedRunner', "
                                      "max_iters=2)\n")
    (tmp_path / 'mycfg.py').write_text("_base_ = ['./base.py']\noptimizer = dict(lr=0.01)\n")
    sources = {p: (tmp_path / p).read_bytes() for p in ('base.py', 'mycfg.py')}
    _run(['mycfg.py', '--work-dir', '.'], str(tmp_path))
    assert {p: (tmp_path / p).read_bytes() for p in sources} == sources
    logs = list(tmp_path.glob('*.log'))
    dump = tmp_path / (logs[0].name[:-len('.log')] + '.py')  # beside <timestamp>.log
    assert "type='ToyRegressor'" in dump.read_text() and 'lr=0.01' in dump.read_text()
    assert f'The merged config is saved as ./{dump.name}: ./mycfg.py is a file the config ' \
           'is read from' in logs[0].read_text()
    assert (tmp_path / 'latest.pth').exists()


@pytest.mark.parametrize('where', ['flag', 'config'])
def test_empty_work_dir_is_an_error(tmp_path, monkeypatch, where):
    cfg = tmp_path / 'toy.py'
    cfg.write_text(TOY_CFG + "runner = dict(type='IterBasedRunner', max_iters=2)\n"
                   + ("work_dir = ''\n" if where == 'config' else ''))
    run_dir = tmp_path / 'cwd'
    run_dir.mkdir()
    monkeypatch.chdir(run_dir)
    train = _load_train_module()
    name = '--work-dir' if where == 'flag' else f'work_dir in {cfg}'
    with pytest.raises(ValueError, match=f"{name} is empty \\(''\\): give the directory"):
        train.main([str(cfg)] + (['--work-dir', ''] if where == 'flag' else []))
    assert os.listdir(run_dir) == []  # nothing written into the current directory


@pytest.mark.slow
@pytest.mark.subprocess
def test_tilde_in_work_dir_and_resume_from_is_the_home_dir(tmp_path):
    home, run_dir = tmp_path / 'home', tmp_path / 'cwd'
    home.mkdir()
    run_dir.mkdir()
    cfg = tmp_path / 'toy.py'
    cfg.write_text(TOY_CFG + "runner = dict(type='IterBasedRunner', max_iters=3)\n"
                   "work_dir = '~/runs/a'\n")
    env = dict(os.environ, PYTHONPATH=ROOT, HOME=str(home))
    for extra in ([], ['--resume-from', '~/runs/a/iter_2.pth', '--work-dir', '~/runs/b']):
        proc = subprocess.run([sys.executable, TRAIN, str(cfg)] + extra, cwd=run_dir, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert os.listdir(run_dir) == []  # no literal ./~ folder
    assert _final(home / 'runs' / 'a')['meta']['iter'] == 3
    log = open(next(str(p) for p in (home / 'runs' / 'b').glob('*.log'))).read()
    assert 'resumed epoch 0, iter 2' in log


_TOY_EPOCHS = "runner = dict(type='EpochBasedRunner', max_epochs=2)\n"
_SMOKE = osp.join(ROOT, 'configs', 'smoke', 'classifier_synthetic.py')


@pytest.mark.parametrize('config, options, message', [
    (TOY_CFG, ['runer.max_epochs=1'], r"unknown config key 'runer' .*did you mean 'runner'\?"),
    (TOY_CFG, ['data.samples_per_gpus=2'],
     r"unknown config key 'data.samples_per_gpus' \(did you mean 'data.samples_per_gpu'"),
    (TOY_CFG, ['lr_config.step=[3,1]'],
     r'lr_config: step must be .*strictly increasing positive ints.*got \[3, 1\]'),
    (TOY_CFG + "data = dict(samples_per_gpu='2', workers_per_gpu=0, "
     "train=dict(type='ToyDataset', num_samples=8))\n", [],
     "data.samples_per_gpu must be a positive int, got '2'"),
    (TOY_CFG, ['data.samples_per_gpu=0'], 'data.samples_per_gpu must be a positive int, got 0'),
    (TOY_CFG, ['data.workers_per_gpu=-1'], 'data.workers_per_gpu must be a non-negative int'),
    (TOY_CFG, ['checkpoint_config.max_keep_ckpt=1'],
     r"checkpoint_config: unknown config key 'max_keep_ckpt' \(did you mean 'max_keep_ckpts'"),
    (None, ['evaluation.metric=bbox', 'runner.max_epochs=1'],
     "evaluation.metric 'bbox' is not a metric of SyntheticClassificationDataset: allowed "
     "'accuracy'"),
], ids=['runer', 'samples_per_gpus', 'step', 'samples_str', 'samples_0', 'workers', 'max_keep',
        'metric'])
def test_config_errors_come_before_anything_is_built(tmp_path, config, options, message):
    """A typo used to train on the defaults, a bad value to fail in torch or after an epoch;
    now the config is refused before the work_dir is made or the model built."""
    path = _SMOKE
    if config is not None:
        path = tmp_path / 'toy.py'
        path.write_text(config + _TOY_EPOCHS)
    argv = [str(path), '--work-dir', str(tmp_path / 'w')]
    argv += ['--cfg-options'] + options if options else []
    with pytest.raises(Exception, match=message):
        _load_train_module().main(argv)
    assert not (tmp_path / 'w').exists()


def test_syntax_error_in_a_base_file_is_named(tmp_path):
    (tmp_path / 'base.py').write_text("model = dict(type='ToyRegressor'\n")
    (tmp_path / 'toy.py').write_text("_base_ = ['./base.py']\n")
    with pytest.raises(SyntaxError, match=re.escape(f"{tmp_path / 'base.py'} (a _base_ of "
                                                    f"{tmp_path / 'toy.py'})")) as info:
        _load_train_module().main([str(tmp_path / 'toy.py')])
    assert info.value.lineno == 1


def test_a_top_level_typo_of_the_config_file_is_warned_in_the_log(tmp_path):
    cfg = tmp_path / 'toy.py'
    cfg.write_text(TOY_CFG + "runner = dict(type='IterBasedRunner', max_iters=2)\n"
                   "runer = dict(max_iters=1)\n")
    work = tmp_path / 'w'
    with pytest.warns(UserWarning, match=f"config key 'runer' in {re.escape(str(cfg))} is not "
                                         "read by ckptzoo.*did you mean 'runner'"):
        _load_train_module().main([str(cfg), '--work-dir', str(work)])
    log = next(work.glob('*.log')).read_text()
    assert f"WARNING - config key 'runer' in {cfg} is not read by ckptzoo, so its value is " \
           "ignored (unless it is a variable that other keys use); did you mean 'runner'?" in log


@pytest.mark.parametrize('name', ['memory_plan.json', 'memory_report.html'])
def test_a_plan_file_that_cannot_be_written_fails_before_anything_is_built(tmp_path, name):
    cfg = tmp_path / 'toy.py'
    cfg.write_text(TOY_CFG + "runner = dict(type='IterBasedRunner', max_iters=2)\n"
                   "memory_budget = '50MB'\n")
    work = tmp_path / 'w'
    (work / name).mkdir(parents=True)
    with pytest.raises(SystemExit) as info:
        _load_train_module().main([str(cfg), '--work-dir', str(work)])
    assert str(info.value) == (
        f"error: cannot write the memory plan's file {work / name}: it is a directory; a run "
        "with memory_budget writes it into the work dir: remove or rename what is there, or "
        "choose another work dir; training did not start")
    assert sorted(p.name for p in work.iterdir()) == [name]  # no log, no config dump


def test_cfg_options_keep_spaces_inside_a_value_and_parse_the_rest_as_mmengine():
    """mmengine's DictAction drops every space ("runs/a b" became runs/ab); here only the
    spaces around values and elements go."""
    args = load_tool('train.py').parse_args([
        'cfg.py', '--cfg-options', 'work_dir=runs/a b', "load_from='my ckpt.pth'",
        'model.backbone.out_indices=(1, 2, 3)', 'a=[1, 2]', 'b=[(1, 2), [x y, z]]', 'c=1,2',
        'd=None', 'e=False', 'f=1e-3', 'g= 7 '])
    assert args.cfg_options == {
        'work_dir': 'runs/a b', 'load_from': 'my ckpt.pth',
        'model.backbone.out_indices': (1, 2, 3), 'a': [1, 2], 'b': [(1, 2), ['x y', 'z']],
        'c': [1, 2], 'd': None, 'e': False, 'f': 1e-3, 'g': 7}
    for tool in ('test.py', 'plan_memory.py'):
        parse = load_tool(tool).parse_args
        argv = ['cfg.py'] + (['ckpt.pth', '--eval', 'mAP'] if tool == 'test.py' else [])
        assert parse(argv + ['--cfg-options', 'work_dir=runs/a b']).cfg_options == {
            'work_dir': 'runs/a b'}
    with pytest.raises(SystemExit):  # unbalanced: a usage error, not an AssertionError
        load_tool('train.py').parse_args(['cfg.py', '--cfg-options', 'a=[1, 2'])


@pytest.mark.parametrize('budget', ['6 GBs', '6GBs', '0', 'lots'])
def test_a_malformed_budget_fails_in_the_config_check_before_anything_is_built(
        tmp_path, monkeypatch, budget):
    """``memory_budget`` is read in the config check: a bad one names the key and the forms
    allowed before a model, data or the work dir exist."""
    import ckptzoo.apis.train as train_api

    def built(*args, **kwargs):
        raise AssertionError('a model was built')
    monkeypatch.setattr(train_api, 'build_train_model', built)
    cfg = tmp_path / 'toy.py'
    cfg.write_text(TOY_CFG + "runner = dict(type='IterBasedRunner', max_iters=2)\n")
    tool = load_tool('train.py')
    monkeypatch.setattr(tool, 'build_train_model', built)
    with pytest.raises(Exception, match=r"memory_budget must be (positive: )?a number of bytes "
                                        rf".*, got '?{re.escape(budget)}'?$"):
        tool.main([str(cfg), '--work-dir', str(tmp_path / 'w'),
                   '--cfg-options', f'memory_budget={budget}'])
    assert not (tmp_path / 'w').exists()


def _free_slurm_job_id():
    """A job id whose derived port (20000 + id % 10000) is free here."""
    import random
    import socket
    for _ in range(100):
        job = random.randrange(10 ** 6)
        with socket.socket() as s:
            try:
                s.bind(('127.0.0.1', 20000 + job % 10000))
            except OSError:
                continue
        return job
    raise RuntimeError('no free port in 20000-29999')


@pytest.mark.slow
@pytest.mark.subprocess
def test_slurm_launcher_two_tasks_equal_torchrun(tmp_path):
    """`--launcher slurm` as srun starts it (SLURM_* faked, a fake scontrol on PATH): both
    tasks find the same master address and port, train with gloo, and end with the weights
    of the same run under torchrun."""
    cfg = tmp_path / 'toy.py'
    cfg.write_text(TOY_CFG + "runner = dict(type='EpochBasedRunner', max_epochs=2)\n")
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    (bin_dir / 'scontrol').write_text('#!/bin/sh\necho 127.0.0.1\necho 127.0.0.2\n')
    (bin_dir / 'scontrol').chmod(0o755)
    base = {k: v for k, v in os.environ.items()
            if not k.startswith('SLURM_') and k not in ('MASTER_PORT', 'MASTER_ADDR', 'RANK',
                                                        'WORLD_SIZE', 'LOCAL_RANK')}
    base.update(PYTHONPATH=ROOT, OMP_NUM_THREADS='1', PATH=f'{bin_dir}:{os.environ["PATH"]}',
                SLURM_NTASKS='2', SLURM_NODELIST='node[1-2]',
                SLURM_JOB_ID=str(_free_slurm_job_id()))
    procs = [subprocess.Popen(
        [sys.executable, TRAIN, str(cfg), '--work-dir', str(tmp_path / 'slurm'),
         '--launcher', 'slurm'], cwd=ROOT, env=dict(base, SLURM_PROCID=str(r),
                                                     SLURM_LOCALID=str(r)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], '\n'.join(o[-3000:] for o in outs)
    log = open(next(str(p) for p in (tmp_path / 'slurm').glob('*.log'))).read()
    assert 'Distributed training: True (world size 2)' in log
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS='1')
    proc = subprocess.run(
        [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2',
         '--master_port', str(_free_port()), TRAIN, str(cfg), '--work-dir',
         str(tmp_path / 'ddp'), '--launcher', 'pytorch'], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    slurm, ddp = _final(tmp_path / 'slurm'), _final(tmp_path / 'ddp')
    assert slurm['meta']['iter'] == ddp['meta']['iter'] == 8
    assert slurm['state_dict'].keys() == ddp['state_dict'].keys()
    for key, value in ddp['state_dict'].items():
        torch.testing.assert_close(slurm['state_dict'][key], value, rtol=0, atol=0)


def test_the_launch_scripts_have_mmdets_arguments():
    """The four scripts take mmdet 2.x's positional arguments and environment variables."""
    tools = osp.join(ROOT, 'tools')
    scripts = {name: open(osp.join(tools, name)).read() for name in (
        'dist_train.sh', 'dist_test.sh', 'slurm_train.sh', 'slurm_test.sh')}
    for name, text in scripts.items():
        assert os.access(osp.join(tools, name), os.X_OK), name
        assert subprocess.run(['bash', '-n', osp.join(tools, name)]).returncode == 0, name
    for name in ('dist_train.sh', 'dist_test.sh'):
        assert 'torchrun' in scripts[name] and '--launcher pytorch' in scripts[name]
        for var in ('NNODES', 'NODE_RANK', 'PORT', 'MASTER_ADDR'):
            assert f'{var}=${{{var}:-' in scripts[name], (name, var)
    for name in ('slurm_train.sh', 'slurm_test.sh'):
        assert '--launcher="slurm"' in scripts[name]
        for var in ('GPUS', 'GPUS_PER_NODE', 'CPUS_PER_TASK', 'SRUN_ARGS'):
            assert f'{var}=${{{var}:-' in scripts[name], (name, var)
    assert 'CONFIG=$1\nGPUS=$2' in scripts['dist_train.sh']
    assert 'CONFIG=$1\nCHECKPOINT=$2\nGPUS=$3' in scripts['dist_test.sh']
    assert 'PARTITION=$1\nJOB_NAME=$2\nCONFIG=$3\nWORK_DIR=$4' in scripts['slurm_train.sh']
    assert 'PARTITION=$1\nJOB_NAME=$2\nCONFIG=$3\nCHECKPOINT=$4' in scripts['slurm_test.sh']


@pytest.mark.slow
@pytest.mark.subprocess
def test_dist_train_script_runs_torchrun(tmp_path):
    cfg = tmp_path / 'toy.py'
    cfg.write_text(TOY_CFG + "runner = dict(type='IterBasedRunner', max_iters=2)\n")
    env = dict(os.environ, OMP_NUM_THREADS='1', PORT=str(_free_port()))
    proc = subprocess.run(['bash', osp.join(ROOT, 'tools', 'dist_train.sh'), str(cfg), '2',
                           '--work-dir', str(tmp_path / 'w')], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _final(tmp_path / 'w')['meta']['iter'] == 2


@pytest.mark.subprocess
def test_a_user_backbone_from_custom_imports_trains_with_cp_and_is_planned(tmp_path):
    """tools/train.py on a config whose backbone a user module registers (``custom_imports``),
    describing no checkpoint units: ``with_cp=True`` checkpoints its derived units, and a
    ``memory_budget`` plans them (the plan file names them)."""
    import json
    cfg = tmp_path / 'user.py'
    cfg.write_text(
        "custom_imports = dict(imports=['tests.helpers.user_parts'], "
        "allow_failed_imports=False)\n"
        "model = dict(type='ImageClassifier', backbone=dict(type='UserStageNet', width=8, "
        "depths=(2, 2, 2), out_indices=(2, ), with_cp=True), head=dict(type='LinearClsHead', "
        "num_classes=4, in_channels=64, topk=(1, )))\n"
        "data = dict(samples_per_gpu=4, workers_per_gpu=0, train=dict("
        "type='SyntheticClassificationDataset', num_samples=8, num_classes=4, img_size=32, "
        "seed=0))\n"
        "optimizer = dict(type='SGD', lr=0.01, momentum=0.9)\n"
        "optimizer_config = dict(grad_clip=None)\n"
        "runner = dict(type='IterBasedRunner', max_iters=2)\n"
        "checkpoint_config = dict(interval=2, by_epoch=False)\n"
        "log_config = dict(interval=1, hooks=[dict(type='TextLoggerHook')])\n"
        "workflow = [('train', 1)]\nlr_config = None\nmemory_budget = '64MiB'\nseed = 0\n")
    proc = _run([str(cfg), '--work-dir', str(tmp_path / 'w')], ROOT)
    plan = json.loads((tmp_path / 'w' / 'memory_plan.json').read_text())
    units = list(plan['plan'])
    assert units[:3] == ['backbone.stem', 'backbone.stages.0.0', 'backbone.stages.0.1']
    assert _final(tmp_path / 'w')['meta']['iter'] == 2
    assert 'UserStageNet' in proc.stdout + proc.stderr or 'UserStageNet' in open(
        next(str(p) for p in (tmp_path / 'w').glob('*.log'))).read()
