"""The launchers' environments: SLURM's rank, world size, local rank, master address and a
port every rank derives alike; Open MPI's; the errors that name what is missing."""
import os

import pytest
import torch

from ckptzoo.runner import dist_utils
from ckptzoo.runner.dist_utils import first_slurm_host, slurm_port


#: what init_dist reads or writes: each is put back as it was after the test (init_dist
#: writes os.environ itself, and a leaked RANK / WORLD_SIZE would reach the subprocesses of
#: later tests in this worker)
TOUCHED = ('MASTER_PORT', 'MASTER_ADDR', 'RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'SLURM_PROCID',
           'SLURM_NTASKS', 'SLURM_NODELIST', 'SLURM_JOB_ID', 'SLURM_LOCALID', 'PATH',
           'OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE', 'OMPI_COMM_WORLD_LOCAL_RANK')


@pytest.fixture
def env(monkeypatch):
    for key in list(os.environ):
        if key.startswith(('SLURM_', 'OMPI_')):
            monkeypatch.delenv(key)
    path = os.environ.get('PATH')
    for key in TOUCHED:  # set, then deleted: both recorded, so undone (absent stays absent)
        monkeypatch.setenv(key, '')
        monkeypatch.delenv(key)
    monkeypatch.setenv('PATH', path or '')
    monkeypatch.setattr(dist_utils.dist, 'is_initialized', lambda: True)
    monkeypatch.setattr(dist_utils.dist, 'get_rank', lambda: int(os.environ['RANK']))
    monkeypatch.setattr(dist_utils.dist, 'get_world_size',
                        lambda: int(os.environ['WORLD_SIZE']))
    return monkeypatch


@pytest.mark.parametrize('nodelist, host', [
    ('node[1-4]', 'node1'), ('node[01-04,7]', 'node01'), ('gpu3,gpu5', 'gpu3'),
    ('a-[10-12]-ib', 'a-10-ib'), ('single', 'single'), ('node[7,9-10],cpu1', 'node7')])
def test_first_host_of_a_node_list(nodelist, host):
    assert first_slurm_host(nodelist) == host


def test_the_port_is_the_same_for_every_rank(env):
    env.setenv('SLURM_JOB_ID', '4242421')
    assert slurm_port() == 20000 + 4242421 % 10000 == 22421
    assert not 32768 <= slurm_port() <= 60999  # never an ephemeral port
    env.setenv('MASTER_PORT', '29510')
    assert slurm_port() == 29510
    assert slurm_port(29600) == 29600  # dist_params.port first
    with pytest.raises(ValueError, match="dist_params.port must be a port number"):
        slurm_port(70000)
    env.delenv('MASTER_PORT')
    env.delenv('SLURM_JOB_ID')
    with pytest.raises(RuntimeError, match='no numeric SLURM_JOB_ID'):
        slurm_port()


def test_slurm_environment(env, tmp_path):
    env.setenv('SLURM_PROCID', '3')
    env.setenv('SLURM_NTASKS', '4')
    env.setenv('SLURM_NODELIST', 'node[2-3]')
    env.setenv('SLURM_JOB_ID', '77')
    env.setenv('PATH', str(tmp_path))  # no scontrol: the node list is read here
    assert dist_utils.init_dist('slurm') == (3, 4)
    assert (os.environ['RANK'], os.environ['WORLD_SIZE']) == ('3', '4')
    assert os.environ['MASTER_ADDR'] == 'node2' and os.environ['MASTER_PORT'] == '20077'
    gpus = torch.cuda.device_count()
    assert os.environ['LOCAL_RANK'] == str(3 % gpus if gpus else 0)
    env.setenv('SLURM_LOCALID', '1')
    env.delenv('MASTER_ADDR')
    scontrol = tmp_path / 'scontrol'
    scontrol.write_text('#!/bin/sh\necho host-a; echo host-b\n')
    scontrol.chmod(0o755)
    dist_utils.init_dist('slurm', port=29777)
    assert os.environ['LOCAL_RANK'] == '1' and os.environ['MASTER_ADDR'] == 'host-a'
    assert os.environ['MASTER_PORT'] == '29777'


def test_slurm_and_mpi_errors_name_what_is_missing(env):
    with pytest.raises(RuntimeError, match='SLURM_PROCID, SLURM_NTASKS, SLURM_NODELIST'):
        dist_utils.init_dist('slurm')
    with pytest.raises(RuntimeError, match='--launcher pytorch \\(torchrun\\)'):
        dist_utils.init_dist('mpi')
    with pytest.raises(ValueError, match="one of pytorch, slurm, mpi, got 'sge'"):
        dist_utils.init_dist('sge')
    with pytest.raises(ValueError, match='dist_params.port is for --launcher slurm'):
        dist_utils.init_dist('pytorch', port=29500)


def test_mpi_environment(env):
    for key, value in dict(OMPI_COMM_WORLD_RANK='1', OMPI_COMM_WORLD_SIZE='2',
                           OMPI_COMM_WORLD_LOCAL_RANK='1').items():
        env.setenv(key, value)
    with pytest.raises(RuntimeError, match='needs MASTER_ADDR'):
        dist_utils.init_dist('mpi')
    env.setenv('MASTER_ADDR', '10.0.0.1')
    assert dist_utils.init_dist('mpi') == (1, 2)
    assert os.environ['MASTER_PORT'] == '29500' and os.environ['LOCAL_RANK'] == '1'


def test_the_environment_is_put_back(env):
    """(the fixture's own check: after a test that ran init_dist, nothing it wrote stays)"""
    env.setenv('SLURM_PROCID', '0')
    env.setenv('SLURM_NTASKS', '1')
    env.setenv('SLURM_NODELIST', 'n1')
    env.setenv('SLURM_JOB_ID', '5')
    dist_utils.init_dist('slurm')
    assert os.environ['RANK'] == '0'
    env.undo()
    assert 'RANK' not in os.environ and 'WORLD_SIZE' not in os.environ
    assert 'MASTER_PORT' not in os.environ and 'SLURM_PROCID' not in os.environ
