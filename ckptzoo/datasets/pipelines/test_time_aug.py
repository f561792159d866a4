"""``MultiScaleFlipAug``: one pass of ``transforms`` per (scale, flip) combination, the
results turned from a list of dicts into a dict of lists (mmdet 2.x)."""
import warnings

from ...registry import TRANSFORMS
from .compose import Compose


@TRANSFORMS.register_module()
class MultiScaleFlipAug:
    """Augmentations in the order: for each scale, no flip then each ``flip_direction``.
    Exactly one of ``img_scale`` (``(w, h)`` tuples, put in ``results['scale']``) and
    ``scale_factor`` (floats, put in ``results['scale_factor']``) must be given."""

    def __init__(self, transforms, img_scale=None, scale_factor=None, flip=False,
                 flip_direction='horizontal'):
        self.transforms = Compose(transforms)
        if (img_scale is None) == (scale_factor is None):
            raise ValueError(f'exactly one of img_scale and scale_factor must be set, got '
                             f'img_scale={img_scale!r}, scale_factor={scale_factor!r}')
        if img_scale is not None:
            scales = img_scale if isinstance(img_scale, list) else [img_scale]
            scales = [tuple(s) for s in scales]
            if not all(len(s) == 2 for s in scales):
                raise TypeError(f'img_scale must be a (w, h) tuple or a list of them, '
                                f'got {img_scale!r}')
            self.img_scale, self.scale_key = scales, 'scale'
        else:
            self.img_scale = scale_factor if isinstance(scale_factor, list) else [scale_factor]
            self.scale_key = 'scale_factor'
        self.flip = flip
        self.flip_direction = (flip_direction if isinstance(flip_direction, list)
                               else [flip_direction])
        if not all(isinstance(d, str) for d in self.flip_direction):
            raise TypeError(f'flip_direction must be a str or a list of str, '
                            f'got {flip_direction!r}')
        if not flip and self.flip_direction != ['horizontal']:
            warnings.warn('flip_direction has no effect when flip is False')
        if flip and not any(isinstance(t, dict) and t.get('type') == 'RandomFlip'
                            or type(t).__name__ == 'RandomFlip' for t in transforms):
            warnings.warn('flip has no effect when RandomFlip is not in transforms')

    def __call__(self, results):
        flip_args = [(False, None)]
        if self.flip:
            flip_args += [(True, d) for d in self.flip_direction]
        aug_data = []
        for scale in self.img_scale:
            for flip, direction in flip_args:
                _results = results.copy()
                _results[self.scale_key] = scale
                _results['flip'] = flip
                _results['flip_direction'] = direction
                aug_data.append(self.transforms(_results))
        return {key: [data[key] for data in aug_data] for key in aug_data[0]}

    def __repr__(self):
        return (f'{self.__class__.__name__}(transforms={self.transforms}, '
                f'img_scale={self.img_scale}, flip={self.flip}, '
                f'flip_direction={self.flip_direction})')
