"""mmcv's LogBuffer: the values hooks put out each iteration, averaged for logging."""
from collections import OrderedDict

import numpy as np


class LogBuffer:

    def __init__(self):
        self.val_history = OrderedDict()
        self.n_history = OrderedDict()
        self.output = OrderedDict()
        self.ready = False

    def clear(self):
        self.val_history.clear()
        self.n_history.clear()
        self.clear_output()

    def clear_output(self):
        self.output.clear()
        self.ready = False

    def update(self, vars, count=1):
        if not isinstance(vars, dict):
            raise TypeError(f'LogBuffer.update takes a dict, got {type(vars)}')
        for key, var in vars.items():
            self.val_history.setdefault(key, []).append(var)
            self.n_history.setdefault(key, []).append(count)

    def average(self, n=0):
        """Average the latest ``n`` values (all when 0), weighted by their counts."""
        if n < 0:
            raise ValueError(f'n must be >= 0, got {n}')
        for key in self.val_history:
            values = np.array(self.val_history[key][-n:], dtype=np.float64)
            nums = np.array(self.n_history[key][-n:], dtype=np.float64)
            self.output[key] = float(np.sum(values * nums) / np.sum(nums))
        self.ready = True
