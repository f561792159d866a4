"""``memory_budget``: bytes from what a user writes in a config or on the command line."""
from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = ['parse_budget', 'format_bytes', 'format_budget', 'UNITS']

#: unit -> bytes; decimal KB / MB / GB as disks and ``nvidia-smi`` count, binary KiB / MiB / GiB
UNITS = {'B': 1, 'KB': 10 ** 3, 'MB': 10 ** 6, 'GB': 10 ** 9,
         'KiB': 2 ** 10, 'MiB': 2 ** 20, 'GiB': 2 ** 30}
_PATTERN = re.compile(r'^\s*(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d+))?\s*([A-Za-z]*)\s*$')
_ALLOWED = ("a number of bytes (612368384), a number with one of the units "
            f"{', '.join(UNITS)} ('6GB', '5800MiB', '612368384B'), or a fraction in (0, 1] of "
            "the device's memory (0.9)")


def _device_total(device_total: int | None) -> int:
    if device_total is not None:
        return device_total
    import torch
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    raise ValueError('a memory_budget given as a fraction of device memory needs a CUDA device; '
                     'on a CPU give bytes or a size such as "6GB"')


def parse_budget(value: int | float | str, device_total: int | None = None) -> int:
    """The budget in bytes (an int).

    ``value`` is an int or float of bytes, a string with an optional unit (B, KB, MB, GB
    decimal; KiB, MiB, GiB binary), or a fraction in (0, 1] of ``device_total`` (by default the
    current CUDA device's total memory). A float or unit-less string <= 1 is a fraction: no GPU
    has one byte. A count of bytes must be whole: ``2.5`` or ``'2.5B'`` is refused
    (``--budget 2.5`` meant 2.5 GB, not 2 bytes); a size in KB and above is rounded down.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f'memory_budget must be {_ALLOWED}, got {value!r}')
    number, unit = value, None
    if isinstance(value, str):
        match = _PATTERN.match(value)
        if not match or (match.group(3) and match.group(3) not in UNITS):
            hint = ''
            if match and match.group(3).lower() in {u.lower() for u in UNITS}:
                hint = ' (units are case-sensitive)'
            raise ValueError(f'memory_budget must be {_ALLOWED}, got {value!r}{hint}')
        # exact decimals: '1.1GB' is 1100000000 bytes, not one less
        number = Fraction(match.group(1)) * Fraction(10) ** int(match.group(2) or 0)
        unit = match.group(3) or None
        if unit is None and number <= 1:
            number = float(number)  # a fraction of the device
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f'memory_budget must be positive: {_ALLOWED}, got {value!r}')
    if unit is None and number <= 1:
        if isinstance(number, int):  # 1 byte is never meant
            raise ValueError(f'memory_budget must be {_ALLOWED}, got {value!r}: one byte '
                             'cannot hold a model (1.0 means all of the device memory)')
        return int(number * _device_total(device_total))
    number = Fraction(number) * UNITS[unit or 'B']
    if unit in (None, 'B') and number.denominator != 1:
        size = f'{float(number):g}'
        raise ValueError(f'memory_budget {value!r} is {size} bytes, not a whole number: give a '
                         f"unit ('{size}GB', '{size}GiB'), a whole number of bytes or a "
                         f'fraction in (0, 1] of the device memory ({_ALLOWED})')
    return math.floor(number)


def format_bytes(nbytes: float) -> str:
    """``'123.4 MiB'``: how budgets and peaks are printed."""
    for unit, size in (('GiB', 2 ** 30), ('MiB', 2 ** 20), ('KiB', 2 ** 10)):
        if abs(nbytes) >= size:
            return f'{nbytes / size:.1f} {unit}'
    return f'{int(nbytes)} B'


def format_budget(nbytes: int) -> str:
    """A budget as the user gave it: a whole number of decimal MB / GB (``memory_budget='2GB'``,
    as disks and ``nvidia-smi`` count) reads ``'2 GB (1.9 GiB)'``, anything else as
    :func:`format_bytes` (``'6.0 GiB'``): ``2GB`` printed as ``1.9 GiB`` alone reads as a
    mistake."""
    nbytes = int(nbytes)
    if nbytes > 0 and nbytes % 10 ** 6 == 0 and nbytes % 2 ** 20:
        unit, size = ('GB', 10 ** 9) if nbytes >= 10 ** 9 else ('MB', 10 ** 6)
        return f'{nbytes / size:g} {unit} ({format_bytes(nbytes)})'
    return format_bytes(nbytes)
