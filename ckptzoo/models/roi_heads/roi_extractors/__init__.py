from .single_level_roi_extractor import SingleRoIExtractor

__all__ = ['SingleRoIExtractor']
