"""The tensors inside nested containers (a batch, a function's arguments, an output)."""
from typing import Any, Iterator

import torch

__all__ = ['iter_tensors']


def iter_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor in ``obj``: a tensor, or lists, tuples and dicts (values) of them at any
    depth; other leaves are skipped."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from iter_tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from iter_tensors(x)
