"""Plot loss / metric curves and summarise iteration times of runs (mmdet 2.x's command).

    python tools/analysis_tools/analyze_logs.py plot_curve A.log.json [B.log.json ...] \\
        --keys loss_cls loss_bbox mAP --legend run_a run_b --out curves.png
    python tools/analysis_tools/analyze_logs.py plot_curve A.log.json --keys memory \\
        [--budget 6GB] --out memory.png
    python tools/analysis_tools/analyze_logs.py cal_train_time A.log.json

``--keys memory`` draws the peak memory of each logging interval (MiB) with the run's memory
budget as a horizontal line: ``--budget``, else the ``budget_bytes`` of the
``memory_plan.json`` beside each log (a run planned under ``memory_budget`` has one).
"""
import argparse
import os.path as osp
import sys

sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from ckptzoo.memory.model.budget import parse_budget  # noqa: E402
from ckptzoo.memory.plan_file import PLAN_FILE, read_plan_file  # noqa: E402
from ckptzoo.utils.log_analysis import cal_train_time, load_json_logs, plot_curve  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Analyze JSON logs (<work_dir>/*.log.json)')
    sub = parser.add_subparsers(dest='task', required=True)
    plot = sub.add_parser('plot_curve', help='plot one curve per key and log file')
    plot.add_argument('json_logs', nargs='+', help='the .log.json files of one or more runs')
    plot.add_argument('--keys', nargs='+', default=['mAP'],
                      help='the keys to plot, e.g. loss_cls loss_bbox mAP (default mAP)')
    plot.add_argument('--start-epoch', type=int, default=1,
                      help='plot from this epoch on')
    plot.add_argument('--eval-interval', type=int, default=1,
                      help='accepted for mmdet command lines; read from the log')
    plot.add_argument('--title', help='title of the figure')
    plot.add_argument('--legend', nargs='+', help='one label per log file')
    plot.add_argument('--backend', help='matplotlib backend')
    plot.add_argument('--style', help='matplotlib style, e.g. ggplot')
    plot.add_argument('--out', help='the image to write (default: show a window)')
    plot.add_argument('--budget', help='the memory budget to draw on the memory curve, e.g. '
                      '6GB (default: budget_bytes of memory_plan.json beside each log)')
    timing = sub.add_parser('cal_train_time', help='time per iteration, per epoch')
    timing.add_argument('json_logs', nargs='+', help='the .log.json files')
    timing.add_argument('--include-outliers', action='store_true',
                        help='include the first iteration of each epoch')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        run(args)
    except (FileNotFoundError, KeyError, ValueError) as e:
        sys.exit(f'analyze_logs.py {args.task}: error: {e.args[0] if e.args else e}')


def _budgets(args):
    """Per log, the memory budget (bytes) to draw on the ``memory`` curve, or None."""
    if args.budget is not None:
        if 'memory' not in args.keys:
            raise ValueError(f'--budget is drawn on the memory curve: add memory to --keys '
                             f'(got {" ".join(args.keys)})')
        return [parse_budget(args.budget)] * len(args.json_logs)
    if 'memory' not in args.keys:
        return None
    budgets = []
    for log in args.json_logs:
        plan = osp.join(osp.dirname(osp.abspath(log)), PLAN_FILE)
        budgets.append(read_plan_file(plan)['budget_bytes'] if osp.isfile(plan) else None)
    return budgets


def run(args):
    log_dicts = load_json_logs(args.json_logs)
    if args.task == 'cal_train_time':
        for name, stat in zip(args.json_logs,
                              cal_train_time(log_dicts, args.include_outliers)):
            print(f'-----Analyze train time of {name}-----')
            print(f'slowest epoch {stat["slowest_epoch"]}, average time is '
                  f'{stat["slowest_time"]:.4f}')
            print(f'fastest epoch {stat["fastest_epoch"]}, average time is '
                  f'{stat["fastest_time"]:.4f}')
            print(f'time std over epochs is {stat["std"]:.4f}')
            print(f'average iter time: {stat["average"]:.4f} s/iter')
            print()
        return
    import matplotlib
    if args.backend is not None:
        matplotlib.use(args.backend)
    import matplotlib.pyplot as plt
    if args.style is not None:
        plt.style.use(args.style)
    plot_curve(log_dicts, args.keys, legend=args.legend, title=args.title, out=args.out,
               json_logs=args.json_logs, start_epoch=args.start_epoch,
               budgets=_budgets(args))
    if args.out is None:
        plt.show()
    else:
        print(f'save curve to: {args.out}')


if __name__ == '__main__':
    main()
