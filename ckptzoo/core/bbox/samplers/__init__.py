from .base_sampler import BaseSampler
from .capacity import restore_sampling_at_capacity, samplers_of, set_sampling_at_capacity
from .combined_sampler import CombinedSampler
from .instance_balanced_pos_sampler import InstanceBalancedPosSampler
from .iou_balanced_neg_sampler import IoUBalancedNegSampler
from .ohem_sampler import OHEMSampler
from .pseudo_sampler import PseudoSampler
from .random_sampler import RandomSampler
from .sampling_result import SamplingResult
from .score_hlr_sampler import ScoreHLRSampler

__all__ = ['BaseSampler', 'PseudoSampler', 'RandomSampler', 'CombinedSampler',
           'InstanceBalancedPosSampler', 'IoUBalancedNegSampler', 'OHEMSampler',
           'SamplingResult', 'ScoreHLRSampler', 'samplers_of', 'set_sampling_at_capacity',
           'restore_sampling_at_capacity']

from .mask_pseudo_sampler import MaskPseudoSampler  # noqa: E402
from .mask_sampling_result import MaskSamplingResult  # noqa: E402

__all__ += ['MaskPseudoSampler', 'MaskSamplingResult']
