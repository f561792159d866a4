"""Suite-wide settings."""
import os

import torch

if os.environ.get('PYTEST_XDIST_WORKER'):
    # two workers on a two-core machine: one intra-op thread each, or they contend
    torch.set_num_threads(1)
