from .image import ImageClassifier

__all__ = ['ImageClassifier']
