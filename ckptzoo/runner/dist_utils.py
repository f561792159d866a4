"""Distributed set-up from torchrun's environment (nccl on CUDA, gloo on CPU).

mmengine's ``init_dist`` calls ``torch.cuda.set_device`` unconditionally, so it cannot start
CPU (gloo) processes; this one can.
"""
import os

import torch
import torch.distributed as dist
from mmengine.dist import get_dist_info  # noqa: F401  (re-exported)

__all__ = ['init_dist', 'get_dist_info']

_REQUIRED = ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')


def init_dist(launcher, backend=None, **kwargs):
    """Initialise torch.distributed for ``launcher='pytorch'`` (torchrun / torch.distributed
    .launch). ``backend`` defaults to nccl when CUDA is available, else gloo."""
    if launcher != 'pytorch':
        raise ValueError(f"launcher must be 'none' or 'pytorch', got {launcher!r}")
    missing = [k for k in _REQUIRED if k not in os.environ]
    if missing:
        raise RuntimeError(f'--launcher pytorch needs the environment of torchrun; missing '
                           f'{", ".join(missing)} (start with `torchrun --nproc_per_node N '
                           'tools/train.py ...`)')
    local_rank = int(os.environ.get('LOCAL_RANK', os.environ['RANK']))
    if backend is None:
        backend = 'nccl' if torch.cuda.is_available() else 'gloo'
    if torch.cuda.is_available() and backend == 'nccl':
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, **kwargs)
    return dist.get_rank(), dist.get_world_size()
