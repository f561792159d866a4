from .voc_map import average_precision, bbox_overlaps, eval_map, print_map_summary

__all__ = ['average_precision', 'bbox_overlaps', 'eval_map', 'print_map_summary']
from .openimages_map import eval_openimages_map, tpfp_openimages  # noqa: E402

__all__ += ['eval_openimages_map', 'tpfp_openimages']
from .panoptic_quality import (INSTANCE_OFFSET, PQStat, parse_pq_results,  # noqa: E402
                               pq_compute, pq_compute_single_image)

__all__ += ['INSTANCE_OFFSET', 'PQStat', 'parse_pq_results', 'pq_compute',
            'pq_compute_single_image']
