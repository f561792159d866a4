"""mmdet 2.x ``reduce_mean``: the mean of a tensor over the processes of a distributed run
(the losses' normalisers: the positives of the whole batch, not one GPU's share)."""
import torch.distributed as dist

__all__ = ['reduce_mean']


def reduce_mean(tensor):
    """``tensor`` averaged over every rank (itself when not distributed); a new tensor."""
    if not (dist.is_available() and dist.is_initialized()):
        return tensor
    tensor = tensor.clone()
    dist.all_reduce(tensor.div_(dist.get_world_size()), op=dist.ReduceOp.SUM)
    return tensor
