from .test import collect_results, multi_gpu_test, single_gpu_test

__all__ = ['single_gpu_test', 'multi_gpu_test', 'collect_results']
