from .voc_map import average_precision, bbox_overlaps, eval_map, print_map_summary

__all__ = ['average_precision', 'bbox_overlaps', 'eval_map', 'print_map_summary']
