"""``Compose``: run a list of transforms (configs or callables) in order, as mmdet 2.x."""
from ...registry import TRANSFORMS, build_transform


@TRANSFORMS.register_module()
class Compose:
    """A transform returning ``None`` stops the chain and ``Compose`` returns ``None``, which
    tells a training dataset to try another image (mmdet 2.x semantics)."""

    def __init__(self, transforms):
        if not isinstance(transforms, (list, tuple)):
            raise TypeError(f'transforms must be a list of dicts or callables, got {transforms!r}')
        self.transforms = []
        for transform in transforms:
            if isinstance(transform, dict):
                transform = build_transform(transform)
            elif not callable(transform):
                raise TypeError(f'a transform must be a config dict or a callable, '
                                f'got {transform!r}')
            self.transforms.append(transform)

    def __call__(self, data):
        for t in self.transforms:
            data = t(data)
            if data is None:
                return None
        return data

    def __repr__(self):
        inner = ''.join(f'\n    {t}' for t in self.transforms)
        return f'{self.__class__.__name__}({inner}\n)'
