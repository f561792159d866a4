"""mmdet 2.x ``core/evaluation/panoptic_utils.py``: a panoptic id is
``label + instance_id * INSTANCE_OFFSET`` (stuff and void segments have instance id 0)."""

__all__ = ['INSTANCE_OFFSET']

INSTANCE_OFFSET = 1000
