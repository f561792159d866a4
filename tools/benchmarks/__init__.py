"""The parts of ``tools/benchmark.py``: the config's variants and their run (``variants``), the
peer models and their loops (``peers``), the tables and charts (``report``). The command line
and the job processes stay in ``tools/benchmark.py``; the measuring is
:class:`ckptzoo.memory.StepMeter`."""
