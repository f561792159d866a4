"""ckptzoo: mmcv/mmdet-2.x-style training with activation checkpointing, FP16 and accumulation."""
from .version import __version__  # noqa: F401
from . import core, datasets, models, runner  # noqa: F401  (registers the types)
