"""The trainer's random state in a checkpoint, so that dropout and drop path resume exactly.

A model that draws random numbers in its forward (``nn.Dropout`` in a head, Swin's
``drop_path_rate``, a multi-scale step drawing from numpy or ``random``) draws from the
process's global generators: torch's CPU and CUDA ones, numpy's and Python's. mmcv 1.x saves
none of them, so a resumed run dropped other units than the uninterrupted one. A checkpoint
stores them in ``meta['rng_state']``: a list indexed by rank (under DDP each rank's own, which
differ with ``--diff-seed``), made of bytes, numbers and plain containers, so that
``torch.load(weights_only=True)`` reads it (it refuses numpy's arrays). Bytes rather than
tensors: the states are opaque, and a checkpoint's tensors stay its weights and optimizer state.

The state is taken when the iteration the checkpoint records is complete. Data loading does
not move these generators (samples draw under their own seeds, loaders from
``build_dataloader`` have generators of their own), so nothing between that moment and the
next iteration draws from them.
"""
import random

import numpy as np
import torch
import torch.distributed as dist

__all__ = ['get_rng_state', 'set_rng_state', 'gather_rng_states', 'restore_rng_state']


def get_rng_state():
    """This process's generators: ``python``, ``numpy``, ``torch`` (CPU) and, once CUDA is in
    use, ``cuda`` (one state per visible device)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = dict(python=random.getstate(),
                 numpy=dict(bit_generator=name, key=keys.astype(_KEY).tobytes(), pos=int(pos),
                            has_gauss=int(has_gauss), gauss=float(gauss)),
                 torch=_bytes(torch.get_rng_state()))
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = [_bytes(s) for s in torch.cuda.get_rng_state_all()]
    return state


_KEY = '<u4'  # numpy's MT19937 key: 624 uint32


def _bytes(tensor):
    return tensor.numpy().tobytes()


def _tensor(data):
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def set_rng_state(state):
    """Set the generators from :func:`get_rng_state`'s dict. Returns a reason when the CUDA
    states could not be set (another number of visible devices), else None."""
    version, internal, gauss_next = state['python']
    random.setstate((version, tuple(internal), gauss_next))
    np_state = state['numpy']
    np.random.set_state((np_state['bit_generator'], np.frombuffer(np_state['key'], _KEY),
                         np_state['pos'], np_state['has_gauss'], np_state['gauss']))
    torch.set_rng_state(_tensor(state['torch']))
    cuda = state.get('cuda')
    if cuda is None:
        return None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count != len(cuda):
        return (f'it holds the CUDA random state of {len(cuda)} device(s), this process sees '
                f'{count}: the CUDA generators are not restored')
    torch.cuda.set_rng_state_all([_tensor(s) for s in cuda])
    return None


def gather_rng_states():
    """Collective: every rank's :func:`get_rng_state`, as a list on rank 0 (None on the
    others). Without torch.distributed: a list of this process's state."""
    state = get_rng_state()
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [state]
    rank = dist.get_rank()
    gathered = [None] * dist.get_world_size() if rank == 0 else None
    dist.gather_object(state, gathered, dst=0)
    return gathered


def restore_rng_state(states, rank, world_size, filename, logger):
    """Set this rank's generators from a checkpoint's ``meta['rng_state']``; say in one line
    of the log when the checkpoint cannot give them (mmcv's or an older ckptzoo's checkpoint,
    another number of ranks, the best checkpoint of a DDP run, written by rank 0 alone)."""
    consequence = ('the model\'s random draws (dropout, drop path) continue from the seed, '
                   'not from where the run stopped')
    if states is None:
        logger.warning(f'{filename} holds no random state (saved by mmcv or an older ckptzoo): '
                       f'{consequence}')
        return
    if not isinstance(states, (list, tuple)) or len(states) != world_size:
        count = len(states) if isinstance(states, (list, tuple)) else 'an unknown number of'
        logger.warning(f'{filename} holds the random state of {count} rank(s), this run has '
                       f'{world_size}: it is not restored; {consequence}')
        return
    if states[rank] is None:
        logger.warning(f'{filename} holds no random state for rank {rank} (rank 0 saved it '
                       f'alone, as the best checkpoint): {consequence}')
        return
    problem = set_rng_state(states[rank])
    if problem:
        logger.warning(f'{filename}: {problem}')
