"""Small helpers shared by the runners and hooks."""
import torch

from ..utils.model_wrapper import unwrap_model

__all__ = ['move_to_device', 'get_model_device', 'unwrap_model']


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
