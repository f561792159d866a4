"""The module inside a DataParallel / DistributedDataParallel wrapper, for every layer that
holds a model that may be wrapped (runner, memory planner, checkpointing)."""
import torch.nn as nn

__all__ = ['unwrap_model']


def unwrap_model(model: nn.Module) -> nn.Module:
    """``model.module`` for a (Distributed)DataParallel wrapper, else ``model`` itself."""
    return getattr(model, 'module', model)
