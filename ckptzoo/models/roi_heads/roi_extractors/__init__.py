from .generic_roi_extractor import GenericRoIExtractor
from .single_level_roi_extractor import SingleRoIExtractor

__all__ = ['GenericRoIExtractor', 'SingleRoIExtractor']
