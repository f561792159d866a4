"""Distributed set-up for the launchers of mmcv 1.x: ``pytorch`` (torchrun), ``slurm``
(``srun``) and ``mpi`` (``mpirun``, Open MPI); nccl on CUDA, gloo on CPU.

mmengine's ``init_dist`` calls ``torch.cuda.set_device`` unconditionally, so it cannot start
CPU (gloo) processes; this one can. Under SLURM every rank must reach the same master port
without talking to the others first: the port is the config's ``dist_params.port``, else
``MASTER_PORT``, else one derived from ``SLURM_JOB_ID`` (below the ephemeral range) — never a
free port probed by each process, which lets ranks choose different ports and hang (mmcv 1.x
does that).
"""
import os
import re
import shutil
import subprocess

import torch
import torch.distributed as dist
from mmengine.dist import get_dist_info  # noqa: F401  (re-exported)

__all__ = ['init_dist', 'get_dist_info', 'slurm_master_addr', 'slurm_port',
           'first_slurm_host']

LAUNCHERS = ('pytorch', 'slurm', 'mpi')
_REQUIRED = ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')
_SLURM = ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_NODELIST')
_MPI = ('OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE', 'OMPI_COMM_WORLD_LOCAL_RANK')
#: ports derived from a job id: [20000, 30000), below Linux's ephemeral range (32768-60999)
SLURM_PORT_BASE, SLURM_PORT_SPAN = 20000, 10000


def init_dist(launcher, backend=None, port=None, **kwargs):
    """Initialise torch.distributed for ``launcher`` (``'pytorch'``, ``'slurm'`` or
    ``'mpi'``); ``backend`` defaults to nccl when CUDA is available, else gloo (also where
    a config says nccl and there is no GPU); ``port``
    (``dist_params.port``) is the master port of the slurm and mpi launchers."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher must be 'none' or one of {', '.join(LAUNCHERS)}, got "
                         f'{launcher!r}')
    if launcher == 'slurm':
        _slurm_environment(port)
    elif launcher == 'mpi':
        _mpi_environment(port)
    elif port is not None:
        raise ValueError('dist_params.port is for --launcher slurm / mpi; under torchrun '
                         'give --master_port (or MASTER_PORT)')
    missing = [k for k in _REQUIRED if k not in os.environ]
    if missing:
        raise RuntimeError(f'--launcher pytorch needs the environment of torchrun; missing '
                           f'{", ".join(missing)} (start with `torchrun --nproc_per_node N '
                           'tools/train.py ...`)')
    local_rank = int(os.environ.get('LOCAL_RANK', os.environ['RANK']))
    if backend is None or (backend == 'nccl' and not torch.cuda.is_available()):
        backend = 'nccl' if torch.cuda.is_available() else 'gloo'  # mmdet configs say nccl
    if torch.cuda.is_available() and backend == 'nccl':
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, **kwargs)
    from .process_exit import mark_process_group
    mark_process_group()  # the process ends without the interpreter's teardown
    return dist.get_rank(), dist.get_world_size()


def _need(names, launcher, how):
    missing = [k for k in names if k not in os.environ]
    if missing:
        raise RuntimeError(f'--launcher {launcher} needs {", ".join(missing)} in the '
                           f'environment ({how})')


def _slurm_environment(port):
    """mmcv 1.x's ``_init_dist_slurm``, its port chosen the same way by every rank."""
    _need(_SLURM, 'slurm', 'start each task with srun, e.g. tools/slurm_train.sh')
    rank = int(os.environ['SLURM_PROCID'])
    gpus = torch.cuda.device_count()
    local = os.environ.get('SLURM_LOCALID')
    local_rank = int(local) if local is not None else rank % max(gpus, 1)
    os.environ['MASTER_PORT'] = str(slurm_port(port))
    os.environ.setdefault('MASTER_ADDR', slurm_master_addr(os.environ['SLURM_NODELIST']))
    os.environ['WORLD_SIZE'] = os.environ['SLURM_NTASKS']
    os.environ['RANK'] = str(rank)
    os.environ['LOCAL_RANK'] = str(local_rank)


def _mpi_environment(port):
    """mmcv 1.x's ``_init_dist_mpi`` (Open MPI's variables; MASTER_ADDR must be given)."""
    if not all(k in os.environ for k in _MPI):
        raise RuntimeError('--launcher mpi reads Open MPI\'s OMPI_COMM_WORLD_RANK, _SIZE and '
                           '_LOCAL_RANK, which are not set: start with mpirun (Open MPI), or '
                           'use --launcher pytorch (torchrun) or --launcher slurm (srun)')
    if 'MASTER_ADDR' not in os.environ:
        raise RuntimeError('--launcher mpi needs MASTER_ADDR (the first rank\'s host): '
                           'mpirun -x MASTER_ADDR=<host> ...')
    if port is not None:
        os.environ['MASTER_PORT'] = str(port)
    os.environ.setdefault('MASTER_PORT', '29500')
    os.environ['WORLD_SIZE'] = os.environ['OMPI_COMM_WORLD_SIZE']
    os.environ['RANK'] = os.environ['OMPI_COMM_WORLD_RANK']
    os.environ['LOCAL_RANK'] = os.environ['OMPI_COMM_WORLD_LOCAL_RANK']


def slurm_port(port=None):
    """The master port every rank of a SLURM job agrees on: ``port``, else ``MASTER_PORT``,
    else ``SLURM_PORT_BASE + SLURM_JOB_ID % SLURM_PORT_SPAN``."""
    for value, where in ((port, 'dist_params.port'),
                         (os.environ.get('MASTER_PORT'), 'MASTER_PORT')):
        if value is not None:
            if not str(value).isdigit() or not 0 < int(value) < 65536:
                raise ValueError(f'{where} must be a port number (1-65535), got {value!r}')
            return int(value)
    job = os.environ.get('SLURM_JOB_ID')
    if job is None or not job.isdigit():
        raise RuntimeError('--launcher slurm: no master port (dist_params.port, MASTER_PORT) '
                           f'and no numeric SLURM_JOB_ID to derive one from (got {job!r})')
    return SLURM_PORT_BASE + int(job) % SLURM_PORT_SPAN


def slurm_master_addr(nodelist):
    """The first host of ``SLURM_NODELIST``: ``scontrol show hostname`` where it exists, as
    mmcv, else :func:`first_slurm_host`."""
    if shutil.which('scontrol'):
        out = subprocess.run(['scontrol', 'show', 'hostname', nodelist], capture_output=True,
                             text=True, timeout=60)
        hosts = out.stdout.split()
        if out.returncode == 0 and hosts:
            return hosts[0]
    return first_slurm_host(nodelist)


def first_slurm_host(nodelist):
    """The first host of a SLURM node list: ``node[01-04,7],gpu3`` -> ``node01``."""
    match = re.match(r'([^,\[]*)(?:\[([^\]]*)\])?([^,]*)', nodelist.strip())
    if not match or not match.group(0):
        raise ValueError(f'cannot read the first host of SLURM_NODELIST={nodelist!r}')
    prefix, ranges, suffix = match.groups()
    if ranges is None:
        return prefix + suffix
    first = ranges.split(',')[0].split('-')[0]
    return f'{prefix}{first}{suffix}'
