from .capacity import restore_sampling_at_capacity, samplers_of, set_sampling_at_capacity
from .pseudo_sampler import PseudoSampler
from .random_sampler import RandomSampler
from .sampling_result import SamplingResult

__all__ = ['PseudoSampler', 'RandomSampler', 'SamplingResult', 'samplers_of',
           'set_sampling_at_capacity', 'restore_sampling_at_capacity']
