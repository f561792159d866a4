"""Hook priorities, as in mmcv 1.x: a smaller value runs first."""
from enum import Enum


class Priority(Enum):
    HIGHEST = 0
    VERY_HIGH = 10
    HIGH = 30
    ABOVE_NORMAL = 40
    NORMAL = 50
    BELOW_NORMAL = 60
    LOW = 70
    VERY_LOW = 90
    LOWEST = 100


def get_priority(priority):
    """An int in 0..100 from an int, a name such as ``'NORMAL'`` or a :class:`Priority`."""
    if isinstance(priority, bool):
        raise TypeError(f'priority must be an int, a str or a Priority, got {priority!r}')
    if isinstance(priority, int):
        if not 0 <= priority <= 100:
            raise ValueError(f'priority must be in 0..100, got {priority}')
        return priority
    if isinstance(priority, Priority):
        return priority.value
    if isinstance(priority, str):
        if priority.upper() not in Priority.__members__:
            raise ValueError(f'unknown priority {priority!r}: allowed are '
                             f'{", ".join(Priority.__members__)} or an int in 0..100')
        return Priority[priority.upper()].value
    raise TypeError(f'priority must be an int, a str or a Priority, got {priority!r}')
