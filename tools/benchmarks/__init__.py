"""The benchmarks, one command each, run as ``python tools/benchmarks/<name>.py``:

* ``steps``: peak memory and time per training step of the memory savers and of peer models;
  its parts are the config's variants and their run (``variants``), the peer models and their
  loops (``peers``), the tables and charts (``report``); the measuring is
  :class:`ckptzoo.memory.StepMeter`;
* ``planner``: the memory planner against budgets, one table per model;
* ``batch_plans``: plans that follow the batch on an epoch of mixed-shape data.

All of them build their data and configs with ``synthetic`` (generated datasets through a
shipped config's pipeline, the run reduced to its training step).
"""
