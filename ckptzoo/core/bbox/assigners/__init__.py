from .assign_result import AssignResult
from .max_iou_assigner import MaxIoUAssigner
from .region_assigner import RegionAssigner

__all__ = ['AssignResult', 'MaxIoUAssigner', 'RegionAssigner']

# YOLOv3's assigner (kept apart: the lines above are shared edits)
from .grid_assigner import GridAssigner  # noqa: E402

__all__ += ['GridAssigner']
from .ascend_max_iou_assigner import AscendMaxIoUAssigner  # noqa: E402

__all__ += ['AscendMaxIoUAssigner']
