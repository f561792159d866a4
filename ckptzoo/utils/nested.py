"""The tensors inside nested containers (a batch, a function's arguments, an output)."""
from typing import Any, Callable, Iterable, Iterator, Optional

import torch

__all__ = ['iter_tensors']


def iter_tensors(obj: Any,
                 expand: Optional[Callable[[Any], Optional[Iterable[Any]]]] = None
                 ) -> Iterator[torch.Tensor]:
    """Every tensor in ``obj``: a tensor, or lists, tuples and dicts (values) of them at any
    depth. Any other leaf is skipped, unless ``expand(leaf)`` returns what it holds (e.g. a
    module's parameters), which is walked in turn."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from iter_tensors(x, expand)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from iter_tensors(x, expand)
    elif expand is not None:
        inner = expand(obj)
        if inner is not None:
            yield from iter_tensors(list(inner), expand)
