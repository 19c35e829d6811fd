"""How far a demo's metric moves with the seed and the CPU's summation order, and whether a run
falls inside.

    python tools/analysis_tools/demo_spread.py CONFIG [--seeds 0 1 2 3 4] [--threads 1 2] [--jobs J]
        [--out-dir DIR] [--record-dir docs/records/demo_spread]
    python tools/analysis_tools/demo_spread.py CONFIG --check WORK_DIR [--record-dir DIR]

Each seed trains with each thread count (another count reorders torch's reductions, as another CPU
does) through ``tools/train.py`` in a process of its own; the metric is the final validation. Each
run keeps ``DIR/seed<s>-threads<t>/result.json``: a rerun skips what is done and refuses a folder of
other settings. The record (:mod:`.records`) holds every run, the mean and the range.

``--check WORK_DIR`` prints whether the newest ``tools/test.py`` metric in WORK_DIR falls inside the
newest record's range; ``make demo`` ends with it.
"""
import argparse
import json
import os
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from .compare_attentions import METRIC_KEYS, read_back
from .processes import run_logged

DEFAULT_RECORDS = Path('docs/records/demo_spread')


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2, 3, 4])
    parser.add_argument('--threads', type=int, nargs='+', default=[1, 2])
    parser.add_argument('--jobs', type=int, default=1, help='training runs side by side')
    parser.add_argument('--out-dir', type=Path, help='default work_dirs/demo_spread/<config name>')
    parser.add_argument('--record-dir', type=Path,
                        help=f'where the record goes (and --check reads it), '
                        f'e.g. {DEFAULT_RECORDS}')
    parser.add_argument('--check', type=Path, metavar='WORK_DIR',
                        help='compare the test run in WORK_DIR with '
                        'the newest record of CONFIG instead of measuring')
    parser.add_argument('--timeout', type=float, default=7200,
                        help='seconds one training run may take')
    args = parser.parse_args(argv)
    if min(args.jobs, *args.threads) < 1:
        parser.error(f'--jobs and --threads must be at least 1, got {args.jobs} and {args.threads}')
    if not Path(args.config).is_file():
        parser.error(f'config {args.config} does not exist')
    if args.check and not args.record_dir:
        parser.error('--check needs --record-dir, where the measured range is kept')
    args.out_dir = args.out_dir or Path('work_dirs/demo_spread') / Path(args.config).stem
    return args


# mmdet's CocoMetric logs this and returns no metric where no detection passed: mAP 0
NO_DETECTIONS = 'The testing results of the whole dataset is empty'


def logged_metric(metrics: Dict, log: Path) -> Optional[Tuple[str, float]]:
    key = next((key for key in METRIC_KEYS if key in metrics), None)
    if key:
        return key, float(metrics[key])
    if log.is_file() and NO_DETECTIONS in log.read_text():
        return 'coco/bbox_mAP', 0.0
    return None


def final_metric(work_dir: Path) -> Tuple[str, float]:
    """The metric of the newest training run's last validation under ``work_dir`` (mmengine's
    ``<stamp>/vis_data/scalars.json``)."""
    for stamp in sorted((path.parent.parent for path in work_dir.glob('*/vis_data/scalars.json')),
                        reverse=True):
        lines = (stamp / 'vis_data' / 'scalars.json').read_text().splitlines()
        validations = [json.loads(line) for line in lines
                       if any(key in line for key in METRIC_KEYS)]
        found = logged_metric(validations[-1] if validations else {}, stamp / f'{stamp.name}.log')
        if found:
            return found
    raise RuntimeError(f'no {" or ".join(METRIC_KEYS)} logged under {work_dir}')


def tested_runs(work_dir: Path) -> Iterator[Tuple[Dict, Path]]:
    """The metrics and the log of each ``tools/test.py`` run in ``work_dir`` (mmengine's
    ``<stamp>/<stamp>.json`` beside ``<stamp>.log``), the newest first."""
    for path in sorted(work_dir.glob('*/*.json'), reverse=True):
        if path.stem == path.parent.name:
            yield json.loads(path.read_text()), path.with_suffix('.log')


def metric_of_test_run(work_dir: Path) -> Tuple[str, float]:
    """The metric of the newest ``tools/test.py`` run in ``work_dir``."""
    for metrics, log in tested_runs(work_dir):
        found = logged_metric(metrics, log)
        if found:
            return found
    raise SystemExit(f'error: no test run with {" or ".join(METRIC_KEYS)} in {work_dir}; run '
                     'tools/test.py first')


def run_task(out_dir: Path, config: str, seed: int, threads: int) -> Dict:
    folder = out_dir / f'seed{seed}-threads{threads}'
    settings = dict(config=config, seed=seed, threads=threads)
    return dict(settings=settings, folder=str(folder), out=str(folder / 'result.json'),
                log=str(folder / 'run.log'))


def train_run(task: Dict, timeout: float) -> Dict:
    """One training run of ``task`` in its own process; a failure is a result with an ``error``."""
    folder, settings = Path(task['folder']), task['settings']
    folder.mkdir(parents=True, exist_ok=True)
    threads = str(settings['threads'])
    env = dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads,
               CUDA_VISIBLE_DEVICES='')
    command = [sys.executable, '-m', 'mmvisattn.launch.train', settings['config'], '--work-dir',
               str(folder / 'work'), '--cfg-options', f'randomness.seed={settings["seed"]}']
    error = run_logged(command, Path(task['log']), env, timeout)
    if error:
        return dict(settings, error=error)
    key, value = final_metric(folder / 'work')
    result = dict(settings, metric=key, value=value)
    Path(task['out']).write_text(json.dumps(dict(result, settings=settings), indent=1) + '\n')
    return result


def summary(config: str, runs: List[Dict]) -> Dict:
    values = [run['value'] for run in runs if 'value' in run]
    metric = next((run['metric'] for run in runs if 'metric' in run), None)
    row = dict(config=config, metric=metric,
               runs=[{k: v for k, v in run.items() if k != 'settings'} for run in runs])
    if values:
        row.update(mean=statistics.mean(values), min=min(values), max=max(values),
                   range=max(values) - min(values),
                   sd=statistics.stdev(values) if len(values) > 1 else 0.0)
    return row


def measure(args: argparse.Namespace) -> Dict:
    tasks = [run_task(args.out_dir, args.config, seed,
                      threads) for threads in args.threads for seed in args.seeds]
    results = [read_back(task) for task in tasks]  # other settings: refused before any run
    todo = [task for task, done in zip(tasks, results) if done is None]
    with ThreadPoolExecutor(args.jobs) as pool:
        fresh = iter(list(pool.map(lambda task: train_run(task, args.timeout), todo)))
    # the fresh results in the order they were left to do
    runs = [done or next(fresh) for done in results]
    return summary(args.config, runs)


def newest_record(record_dir: Path, config: str) -> Optional[Path]:
    """The record of ``config`` written last (by date and UTC time; one day's differ by commit)."""
    from .records import slug
    pattern = f'*_{slug(Path(config).stem)}_demo_spread.json'

    def written(path: Path) -> Tuple[str, str, str]:
        record = json.loads(path.read_text())
        return record['date'], record['time'], path.name
    return max(record_dir.glob(pattern), key=written, default=None)


def check(args: argparse.Namespace) -> str:
    """One line: the work folder's metric beside the recorded range, and whether it falls inside."""
    key, value = metric_of_test_run(args.check)
    path = newest_record(args.record_dir, args.config)
    if path is None:
        return (f'{key} {value:.3f}; no measured range of {Path(args.config).name} in '
                f'{args.record_dir}')
    record = json.loads(path.read_text())['results']
    inside = record['min'] <= value <= record['max']
    return (f'{key} {value:.3f}: {"inside" if inside else "OUTSIDE"} the range measured over '
            f'{len(record["runs"])} '
            f'runs, {record["min"]:.3f}-{record["max"]:.3f} (mean {record["mean"]:.3f}; {path})')


def table(results: Dict) -> str:
    lines = ['| seed | threads | ' + (results['metric'] or 'metric') + ' |', '|---|---|---|']
    lines += [
        f'| {run["seed"]} | {run["threads"]} | {run["value"]:.3f} |'
        if 'value' in run
        else f'| {run["seed"]} | {run["threads"]} | {run["error"]} |'
        for run in results['runs']
    ]
    if 'mean' in results:
        lines.append(f'mean {results["mean"]:.3f}, range {results["min"]:.3f}-{results["max"]:.3f} '
                     f'({results["range"]:.3f}), sd {results["sd"]:.3f}')
    return '\n'.join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.check:
        print(check(args))
        return
    results = measure(args)
    print(table(results))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / 'spread.json').write_text(json.dumps(results, indent=1) + '\n')
    written = [args.out_dir / 'spread.json']
    if args.record_dir:
        from .records import cpu_record, write_cpu_record
        written += write_cpu_record(cpu_record('demo_spread', results,
                                               label=Path(args.config).stem),
                                    args.out_dir, args.record_dir)
    print('wrote ' + ', '.join(map(str, written)))
    if any('error' in run for run in results['runs']):
        sys.exit(1)


if __name__ == '__main__':
    main()
