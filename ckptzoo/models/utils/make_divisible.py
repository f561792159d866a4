"""mmdet's ``make_divisible``: channel counts of the width-scaled light backbones."""

__all__ = ['make_divisible']


def make_divisible(value, divisor, min_value=None, min_ratio=0.9):
    """``value`` rounded to the nearest multiple of ``divisor`` (at least ``min_value``,
    default ``divisor``), one ``divisor`` more when rounding down lost more than
    ``1 - min_ratio`` of it: MobileNet / EfficientNet widths, as mmdet computes them."""
    if min_value is None:
        min_value = divisor
    new_value = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if new_value < min_ratio * value:
        new_value += divisor
    return new_value
