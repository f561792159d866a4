"""Colours per class (mmdet 2.x's ``get_palette``), RGB tuples of ints in [0, 255]."""
import numpy as np

__all__ = ['get_palette', 'palette_val']


def _default_palette(num_classes):
    """Distinct, stable colours: matplotlib's tab10 (tab20 past 10 classes), then evenly
    spaced hues. mmdet draws random colours (seed 42), which are often hard to tell apart."""
    from matplotlib import colormaps
    if num_classes <= 10:
        colors = colormaps['tab10'].colors[:num_classes]
    elif num_classes <= 20:
        colors = colormaps['tab20'].colors[:num_classes]
    else:
        colors = colormaps['hsv'](np.linspace(0, 1, num_classes, endpoint=False))[:, :3]
    return [tuple(int(round(c * 255)) for c in color[:3]) for color in colors]


def get_palette(palette, num_classes):
    """A list of ``num_classes`` RGB colours.

    Args:
        palette: None or ``'random'`` (distinct default colours), a list of RGB tuples (one
            per class), one RGB tuple (every class), or a matplotlib colour name (``'green'``).
        num_classes (int): how many colours.
    """
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
        raise ValueError(f'num_classes must be a non-negative int, got {num_classes!r}')
    if palette is None or palette == 'random':
        return _default_palette(num_classes)
    if isinstance(palette, tuple) and len(palette) == 3:
        return [tuple(int(c) for c in palette)] * num_classes
    if isinstance(palette, (list, tuple)):
        if len(palette) < num_classes:
            raise ValueError(f'the palette has {len(palette)} colours for {num_classes} '
                             'classes')
        return [tuple(int(c) for c in color) for color in palette]
    if isinstance(palette, str):
        from matplotlib.colors import to_rgb
        try:
            rgb = to_rgb(palette)
        except ValueError:
            raise ValueError(f'unknown colour {palette!r}: give a matplotlib colour name, an '
                             'RGB tuple, a list of them, or None') from None
        return [tuple(int(round(c * 255)) for c in rgb)] * num_classes
    raise TypeError(f'palette must be None, a colour name, an RGB tuple or a list of them, '
                    f'got {palette!r}')


def palette_val(palette):
    """RGB in [0, 255] -> RGB in [0, 1] (matplotlib's convention)."""
    return [tuple(c / 255 for c in color) for color in palette]
