"""``--cfg-options KEY=VALUE ...``: mmengine's ``DictAction`` without its loss of spaces.

mmengine removes every space from a value before parsing it, so ``"work_dir=runs/a b"`` gave
``runs/ab`` (and a later ``--auto-resume`` with the real path found nothing). Here the spaces
around a value and around each element of a list or tuple go, as there; the ones inside a plain
string stay. Everything else is mmengine's: ``KEY=V1,V2`` and ``[...]`` are lists, ``(...)``
tuples (nested too), ints, floats, ``true`` / ``false`` (any case) and ``None`` are parsed, quotes
around a value are stripped.
"""
from mmengine.config import DictAction as _MMEngineDictAction

__all__ = ['DictAction']


def _next_comma(text):
    """The index of the first comma outside brackets (``len(text)`` if none)."""
    if text.count('(') != text.count(')') or text.count('[') != text.count(']'):
        raise ValueError(f'unbalanced brackets in {text!r}')
    depth = 0
    for idx, char in enumerate(text):
        if char in '([':
            depth += 1
        elif char in ')]':
            depth -= 1
        elif char == ',' and depth == 0:
            return idx
    return len(text)


class DictAction(_MMEngineDictAction):
    """argparse action: ``KEY=VALUE`` pairs into a dict (mmengine's, keeping inner spaces)."""

    @staticmethod
    def _parse_iterable(val):
        val = val.strip().strip('\'"').strip()
        is_tuple = val.startswith('(') and val.endswith(')')
        if is_tuple or (val.startswith('[') and val.endswith(']')):
            val = val[1:-1]
        elif ',' not in val:
            return _MMEngineDictAction._parse_int_float_bool(val)
        values = []
        while val.strip():
            comma = _next_comma(val)
            values.append(DictAction._parse_iterable(val[:comma]))
            val = val[comma + 1:]
        return tuple(values) if is_tuple else values

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            super().__call__(parser, namespace, values, option_string)
        except ValueError as exc:  # no '=' in an item, unbalanced brackets
            parser.error(f'{option_string or self.dest}: {exc}; give KEY=VALUE pairs, e.g. '
                         'optimizer.lr=0.01 "model.backbone.out_indices=(1, 2, 3)"')
