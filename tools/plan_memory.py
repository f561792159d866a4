"""What does a config need, and what is the fastest way to fit a budget?

    python tools/plan_memory.py CONFIG [--budget 6GB] [--sweep] [--cfg-options k=v ...]
                                [--out plan.json] [--report report.html] [--work-dir DIR]
                                [--boxes N]

Prints, per checkpoint unit, the bytes kept for backward and the recompute cost of each mode
(one probe step per mode at the worst-case input shape), then the plan chosen for the budget
(``--budget``, else the config's ``memory_budget``) with its predicted and measured peak.
``--out`` writes the plan as JSON (``model.set_checkpoint_plan()`` takes its ``plan`` as it
is); ``--sweep`` draws the predicted memory / time of the planner at 20 budgets against
all-off, every unit checkpointed, every combination of per-stage ``with_cp`` and Chen's
sqrt(n) (``--out``'s name with ``.png``, or ``plan_sweep.png``). ``--report`` writes the
memory report, one HTML page that opens from disk: the step's memory over time (plain and the
plan, recorded in the planner's own steps), per unit the bytes kept and the recompute of each
mode, the fixed memory, and with ``--sweep`` the memory / time curve.

When the training data is not on disk yet, the plan is made on synthetic batches of the
pipeline's bound shape with ``--boxes`` ground-truth boxes per image (a detector's), and one
line says so (:func:`ckptzoo.apis.plan_data.planning_datasets`); tools/train.py still needs
the data.
"""
import argparse
import logging
import os
import os.path as osp
import sys
import tempfile
import warnings

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

from ckptzoo.utils.dict_action import DictAction  # noqa: E402

from ckptzoo.apis import (build_training, plan_memory, planning_requested,  # noqa: E402
                          prepare_synthetic_data, set_random_seed)
from ckptzoo.apis.config import check_config, load_config  # noqa: E402
from ckptzoo.apis.plan import plan_made_for  # noqa: E402
from ckptzoo.apis.plan_data import (DEFAULT_BOXES, planning_datasets,  # noqa: E402
                                    without_missing_weights)
from ckptzoo.memory import InfeasibleBudget, format_budget, write_plan_file  # noqa: E402
from ckptzoo.memory.model.baselines import memory_time_sweep  # noqa: E402
from ckptzoo.memory.report.charts import save_png, sweep_figure, sweep_points  # noqa: E402
from ckptzoo.memory.report.html import write_memory_report  # noqa: E402
from ckptzoo.memory.report.table import cost_report, plan_table  # noqa: E402
from ckptzoo.memory.measure.timeline import TimelineSet  # noqa: E402
from ckptzoo.runner.work_dir import unwritable  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config')
    parser.add_argument('--budget', help="e.g. 6GB, 5800MiB, 612368384 or 0.9 of the GPU")
    parser.add_argument('--sweep', action='store_true', help='plot the memory/time curve')
    parser.add_argument('--out', help='write the plan as JSON here')
    parser.add_argument('--report', help='write the memory report (one HTML page) here')
    parser.add_argument('--work-dir', help='(default: a temporary directory)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings as in tools/train.py')
    parser.add_argument('--boxes', type=_box_count, default=None,
                        help='ground-truth boxes per image of the synthetic batches planned on '
                        'when the training data is not on disk (default '
                        f'{DEFAULT_BOXES})')
    args = parser.parse_args(argv)
    outputs = ([('--out', args.out)] if args.out else []) + ([('--sweep', _sweep_path(args))]
                                                              if args.sweep else []) + \
        ([('--report', args.report)] if args.report else [])
    for flag, path in outputs:  # checked now, not after the probe steps
        problem = unwritable(path)
        if problem:
            parser.error(f'{flag}: cannot write {path}: {problem}')
    return args


def _box_count(text):
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(
            f'must be a positive whole number of boxes per image, got {text!r}')
    return value


def _sweep_path(args):
    return (osp.splitext(args.out)[0] if args.out else 'plan_sweep') + '.png'


def _sweep(sweep, result, path):
    """The report's sweep figure (one implementation), as a PNG."""
    chosen = (result.predicted_peak_bytes, result.predicted_step_time) \
        if result.predicted_step_time is not None else None
    save_png(sweep_figure(sweep_points(sweep), result.budget_bytes, chosen,
                          'memory / time (predicted from one probe)'), path)


def main(argv=None):
    args = parse_args(argv)
    cfg = load_config(args.config, args.cfg_options)  # errors name the file and line
    with warnings.catch_warnings():  # as tools/train.py: every warning shown, then it goes on
        warnings.simplefilter('always')
        check_config(cfg)  # a typo'd key or a bad value fails here, before the probe
    if args.budget is not None:
        cfg.memory_budget = args.budget
    cfg.work_dir = args.work_dir or tempfile.mkdtemp(prefix='ckptzoo_plan_')
    cfg.checkpoint_config = cfg.log_config = None
    logger = logging.getLogger('ckptzoo.plan_memory')
    try:
        budget = planning_requested(cfg)
    except ValueError as exc:
        sys.exit(f'error: {exc}')
    if budget is None:
        sys.exit('error: no budget: pass --budget 6GB or set memory_budget in the config'
                 + (' (--report draws a plan for a budget)' if args.report else ''))
    for line in without_missing_weights(cfg):  # weights do not change memory
        print(f'plan_memory: planning without pretrained weights that are not here ({line}): '
              'they do not change the memory a step needs')
    set_random_seed(cfg.get('seed') or 0)
    prepare_synthetic_data(cfg)
    try:
        datasets, note = planning_datasets(
            cfg, DEFAULT_BOXES if args.boxes is None else args.boxes)
    except ValueError as exc:  # no data, and nothing to make synthetic batches from
        sys.exit(f'error: {exc}')
    if note is not None:
        print(f'plan_memory: {note}')
    elif args.boxes is not None:
        print(f'plan_memory: --boxes {args.boxes} is for synthetic batches; the training data '
              'is on disk and the probe steps on its own batches')
    run = build_training(cfg, datasets=datasets, logger=logger)
    try:
        timelines = TimelineSet()
        result, run = plan_memory(run, cfg, budget, logger=logger,  # the run planned on
                                  timelines=timelines)
    except InfeasibleBudget as exc:
        sys.exit(f'error: {exc}')
    result.made_for = plan_made_for(run, cfg, result.samples_per_gpu)  # a resume compares it
    print(cost_report(result.table))
    print()
    print(plan_table(result))
    if args.out:
        write_plan_file(args.out, result)
        print(f'plan written to {args.out}')
    sweep = memory_time_sweep(result.table) if args.sweep else None
    if args.sweep:
        path = _sweep_path(args)
        _sweep(sweep, result, path)
        print(f'sweep: {path} ({format_budget(budget)} budget)')
    if args.report:
        write_memory_report(result, args.report, timelines, sweep,
                            title=f'Memory plan: {osp.basename(args.config)}')
        print(f'report: {args.report}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
