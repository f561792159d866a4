from .assign_result import AssignResult
from .max_iou_assigner import MaxIoUAssigner
from .region_assigner import RegionAssigner

__all__ = ['AssignResult', 'MaxIoUAssigner', 'RegionAssigner']
from .center_region_assigner import CenterRegionAssigner  # noqa: E402
__all__ += ['CenterRegionAssigner']
from .uniform_assigner import UniformAssigner  # noqa: E402
__all__ += ['UniformAssigner']
