"""WandbLoggerHook and MlflowLoggerHook with the real packages, offline / on a file store:
every logging interval's loss and lr are in the local run files, equal to the JSON log's."""
import glob
import json
import struct
import sys
import time

import pytest
import torch

from ckptzoo.runner import (EpochBasedRunner, IterTimerHook, MlflowLoggerHook, OptimizerHook,
                            TextLoggerHook, WandbLoggerHook)

from tests.helpers.toy import ToyDataset, loader, make_model, quiet_logger


def _train(work_dir, tracker):
    """2 epochs of 8 iterations, logged every 4: at iterations 4, 8, 12, 16."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    runner = EpochBasedRunner(model, optimizer=optimizer, work_dir=str(work_dir),
                              logger=quiet_logger(), max_epochs=2)
    runner.register_hook(OptimizerHook(), priority='ABOVE_NORMAL')
    runner.register_hook(IterTimerHook(), priority='LOW')
    runner.register_hook(TextLoggerHook(interval=4), priority='VERY_LOW')
    runner.register_hook(tracker, priority='VERY_LOW')
    runner.run([loader(ToyDataset(8), 1)], [('train', 1)])
    reference = {}
    with open(glob.glob(str(work_dir / '*.log.json'))[0]) as f:
        for line in f:
            log = json.loads(line)
            if log.get('mode') == 'train':
                reference[(log['epoch'] - 1) * 8 + log['iter']] = (log['loss'], log['lr'])
    assert sorted(reference) == [4, 8, 12, 16]
    return reference


def _wandb_history(path):
    """The history rows of a ``.wandb`` file (the leveldb log format of W&B's run store), and
    whether the file is complete (has the exit record)."""
    from wandb.proto import wandb_internal_pb2 as pb
    with open(path, 'rb') as f:
        data = f.read()
    block, pos, buf, rows, complete = 32768, 7, b'', {}, False
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack('<IHB', data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 0 and length == 0:
            break
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            complete = complete or record.WhichOneof('record_type') == 'exit'
            if record.WhichOneof('record_type') == 'history':
                items = {it.key or '/'.join(it.nested_key): json.loads(it.value_json)
                         for it in record.history.item}
                rows[items['_step']] = items
    return rows, complete


def test_wandb_offline(tmp_path, monkeypatch):
    pytest.importorskip('wandb')
    for var in ('WANDB_DATA_DIR', 'WANDB_CACHE_DIR', 'WANDB_CONFIG_DIR', 'WANDB_ARTIFACT_DIR'):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv('WANDB_MODE', 'offline')
    monkeypatch.setenv('WANDB_SILENT', 'true')
    hook = WandbLoggerHook(init_kwargs=dict(project='ckptzoo-test'), interval=4)
    reference = _train(tmp_path / 'work', hook)
    runs = glob.glob(str(tmp_path / 'work' / 'wandb' / 'offline-run-*' / 'run-*.wandb'))
    assert len(runs) == 1
    for _ in range(100):  # W&B's writer process may still be flushing after wandb.finish()
        rows, complete = _wandb_history(runs[0])
        if complete:
            break
        time.sleep(0.2)
    assert complete
    assert sorted(rows) == [4, 8, 12, 16]
    for step, (loss, lr) in reference.items():
        assert rows[step]['train/loss'] == pytest.approx(loss, abs=1e-5)
        assert rows[step]['learning_rate'] == pytest.approx(lr, abs=1e-5)


def test_mlflow_file_store(tmp_path, monkeypatch):
    pytest.importorskip('mlflow')
    monkeypatch.delenv('MLFLOW_ALLOW_FILE_STORE', raising=False)  # restored afterwards
    store = tmp_path / 'mlruns'
    hook = MlflowLoggerHook(exp_name='toy', tags=dict(kind='test'), params=dict(lr=0.05),
                            log_model=False, interval=4, tracking_uri=f'file://{store}')
    reference = _train(tmp_path / 'work', hook)
    (run,) = [p for p in store.glob('*/*') if (p / 'metrics').is_dir()]
    metrics = {}
    for name in ('train/loss', 'learning_rate'):
        lines = (run / 'metrics' / name).read_text().split('\n')
        # each line: timestamp value step
        metrics[name] = {int(s): float(v) for _, v, s in (ln.split() for ln in lines if ln)}
    for name in metrics:
        assert sorted(metrics[name]) == [4, 8, 12, 16]
    for step, (loss, lr) in reference.items():
        assert metrics['train/loss'][step] == pytest.approx(loss, abs=1e-5)
        assert metrics['learning_rate'][step] == pytest.approx(lr, abs=1e-5)
    assert (run / 'tags' / 'kind').read_text() == 'test'
    assert (run / 'params' / 'lr').read_text() == '0.05'


@pytest.mark.parametrize('hook,module,extra', [(WandbLoggerHook, 'wandb', 'ckptzoo[wandb]'),
                                               (MlflowLoggerHook, 'mlflow', 'ckptzoo[mlflow]')])
def test_missing_package_fails_at_start(tmp_path, monkeypatch, hook, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(ImportError, match=extra.replace('[', r'\[').replace(']', r'\]')):
        _train(tmp_path, hook(interval=4))
