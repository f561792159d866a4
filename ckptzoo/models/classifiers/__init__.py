from .image import ImageClassifier, LinearClsHead

__all__ = ['ImageClassifier', 'LinearClsHead']
