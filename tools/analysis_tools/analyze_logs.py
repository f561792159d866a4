"""Plot loss / metric curves and summarise iteration times of runs (mmdet 2.x's command).

    python tools/analysis_tools/analyze_logs.py plot_curve A.log.json [B.log.json ...] \\
        --keys loss_cls loss_bbox mAP --legend run_a run_b --out curves.png
    python tools/analysis_tools/analyze_logs.py cal_train_time A.log.json
"""
import argparse
import os.path as osp
import sys

sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

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
               json_logs=args.json_logs, start_epoch=args.start_epoch)
    if args.out is None:
        plt.show()
    else:
        print(f'save curve to: {args.out}')


if __name__ == '__main__':
    main()
