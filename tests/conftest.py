"""Suite-wide settings and fixtures."""
import os

import pytest
import torch

from ckptzoo.memory.measure.probe import probe, probe_batch, worst_case_shape
from tests.helpers.configs import build_tiny

if os.environ.get('PYTEST_XDIST_WORKER'):
    # two workers on a two-core machine: one intra-op thread each, or they contend
    torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` skip without a CUDA GPU (one line each in -rs)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason='needs a CUDA GPU (tools/benchmarks/cuda_check.py runs it)')
    for item in items:
        if 'cuda' in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope='module')
def probed(tmp_path_factory):
    """The TINY classifier's run, its worst-case batch and its probed cost table (plain, full,
    selective): ``(cfg, run, batch, table)``, once per test module."""
    cfg, run = build_tiny(tmp_path_factory.mktemp('probe'))
    batch = probe_batch(run, worst_case_shape(cfg))
    return cfg, run, batch, probe(run, batch, modes=(None, 'full', 'selective'))
