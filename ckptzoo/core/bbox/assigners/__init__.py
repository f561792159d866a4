from .assign_result import AssignResult
from .max_iou_assigner import MaxIoUAssigner
from .region_assigner import RegionAssigner

__all__ = ['AssignResult', 'MaxIoUAssigner', 'RegionAssigner']

from .atss_assigner import ATSSAssigner  # noqa: E402

__all__ += ['ATSSAssigner']

from .task_aligned_assigner import TaskAlignedAssigner  # noqa: E402

__all__ += ['TaskAlignedAssigner']
