from .assign_result import AssignResult
from .max_iou_assigner import MaxIoUAssigner
from .region_assigner import RegionAssigner

__all__ = ['AssignResult', 'MaxIoUAssigner', 'RegionAssigner']

from .point_assigner import PointAssigner  # noqa: E402

__all__ += ['PointAssigner']

from .atss_assigner import ATSSAssigner  # noqa: E402

__all__ += ['ATSSAssigner']

from .center_region_assigner import CenterRegionAssigner  # noqa: E402
__all__ += ['CenterRegionAssigner']

# YOLOv3's assigner (kept apart: the lines above are shared edits)
from .grid_assigner import GridAssigner  # noqa: E402

__all__ += ['GridAssigner']

from .uniform_assigner import UniformAssigner  # noqa: E402
__all__ += ['UniformAssigner']

from .approx_max_iou_assigner import ApproxMaxIoUAssigner  # noqa: E402

__all__ += ['ApproxMaxIoUAssigner']

from .ascend_max_iou_assigner import AscendMaxIoUAssigner  # noqa: E402

__all__ += ['AscendMaxIoUAssigner']

from .task_aligned_assigner import TaskAlignedAssigner  # noqa: E402

__all__ += ['TaskAlignedAssigner']

from .sim_ota_assigner import SimOTAAssigner  # noqa: E402

__all__ += ['SimOTAAssigner']

from .hungarian_assigner import HungarianAssigner  # noqa: E402

__all__ += ['HungarianAssigner']
from .mask_hungarian_assigner import MaskHungarianAssigner  # noqa: E402

__all__ += ['MaskHungarianAssigner']
