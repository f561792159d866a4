"""Small helpers shared by the runners and hooks."""
import torch

from ..utils.model_wrapper import unwrap_model

__all__ = ['move_to_device', 'get_model_device', 'cuda_device', 'unwrap_model']


def move_to_device(data, device):
    """Move every tensor in a (nested) batch to ``device``; other leaves are kept."""
    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=True)
    if isinstance(data, dict):
        return type(data)((k, move_to_device(v, device)) for k, v in data.items())
    if isinstance(data, (list, tuple)) and not hasattr(data, '_fields'):
        return type(data)(move_to_device(v, device) for v in data)
    return data


def get_model_device(model):
    for p in model.parameters():
        return p.device
    return torch.device('cpu')


def cuda_device(model):
    """The CUDA device of ``model`` (of its first parameter; a wrapper's is its module's), or
    None when it is not on CUDA (or has no parameters): where memory is read from the
    allocator rather than counted tensor by tensor."""
    device = get_model_device(model)
    return device if device.type == 'cuda' else None
