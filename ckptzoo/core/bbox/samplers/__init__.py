from .pseudo_sampler import PseudoSampler
from .random_sampler import RandomSampler, sampling_at_capacity
from .sampling_result import SamplingResult

__all__ = ['PseudoSampler', 'RandomSampler', 'SamplingResult', 'sampling_at_capacity']
