"""Reference schedules, written from their definitions."""
import math


def cyclic_reference(base, i, per_cycle, up, high, low, gamma):
    """The cyclic schedule from its definition: cosine up, then down, amplitude gamma**cycle."""
    cycle, t = divmod(i, per_cycle)
    peak = base + gamma**cycle * (high - base)
    if t < up:
        return peak + 0.5 * (base - peak) * (1 + math.cos(math.pi * t / up))
    return low * base + 0.5 * (peak - low * base) * (1 + math.cos(math.pi * (t - up) /
                                                                  (per_cycle - up)))
