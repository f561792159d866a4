from .assign_result import AssignResult
from .max_iou_assigner import MaxIoUAssigner
from .region_assigner import RegionAssigner

__all__ = ['AssignResult', 'MaxIoUAssigner', 'RegionAssigner']
from .sim_ota_assigner import SimOTAAssigner  # noqa: E402

__all__ += ['SimOTAAssigner']
