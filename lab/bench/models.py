"""Whole models in training, each project model beside the stock one it replaces (``make
bench-models``), and the largest input each trains at on a GPU.

    python tools/analysis_tools/benchmark_models.py [--families F ...] [--pairs KEY ...]
        [--scales 0.5 0.75 1 1.25 | --sizes HxW ...] [--batch 2] [--rounds 1] [--threads 2]
        [--out-dir work_dirs/bench_models] [--resume] [--record-dir docs/records/bench_models]

Random weights, one step at a time on synthetic targets (:mod:`.model_pairs`). Per pair and size
(``--scales`` of its training size) one process builds both, warms up, then measures a step of each
in alternating order: parameters, the bytes autograd saves (each storage once), the peak resident
set's growth and seconds; at the training size also MACs and ``--rounds`` paired rounds. glibc maps
large blocks on their own for both alike.

**Largest trainable input.** The saved bytes are fitted against pixels (``a + b P + c P^2``, ``c >=
0``) plus 16 bytes a parameter for AdamW; the largest square side fitting 24, 40 and 80 GB is an
upper bound (context, fragmentation and transient buffers not counted), its error the fit's without
the largest size.

Writes ``results.json`` (``--resume`` keeps pairs measured with the same settings), ``tables.md``,
``saved_bytes.png`` and the record into ``--out-dir`` (and ``--record-dir``, which
``docs/records/models.md`` and the family pages render).
"""
import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from lab.bench.measure import in_child
from lab.bench.model_pairs import FAMILIES, PAIRS, ModelPair
from mmvisattn.analysis.records import cpu_record, write_cpu_record

GPU_GB = (24, 40, 80)
BYTES_PER_PARAMETER = 16  # float32 weights and gradients, AdamW's two moments
SATURATED_SIDE = 16384  # predictions stop here


def parse_size(text: str) -> Tuple[int, int]:
    try:
        height, width = (int(side) for side in text.lower().split('x'))
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r}: expected HxW, for example 512x512') from None
    return height, width


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--families', nargs='+', metavar='FAMILY',
                        help=f'default: all of {", ".join(FAMILIES)}')
    parser.add_argument('--pairs', nargs='+', metavar='KEY',
                        help='pair keys (default: every pair of the families)')
    parser.add_argument('--scales', type=float, nargs='+', default=[0.5, 0.75, 1.0, 1.25],
                        help="input sides as fractions of each pair's training size, rounded to "
                        "its stride")
    parser.add_argument('--sizes', type=parse_size, nargs='+', metavar='HxW',
                        help='these sizes for every pair instead (multiples of the stride); the '
                             'largest stands in for the training size')
    parser.add_argument('--batch', type=int, default=2)
    parser.add_argument('--rounds', type=int, default=1,
                        help='paired rounds at the training size after the measured '
                        'steps (which count as the first)')
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--out-dir', type=Path, default=Path('work_dirs/bench_models'))
    parser.add_argument('--resume', action='store_true',
                        help="keep the pairs of --out-dir's results.json that were "
                        'measured with the same sizes, batch, rounds and threads')
    parser.add_argument('--record-dir', type=Path,
                        help='also write the record there, under its name')
    args = parser.parse_args(argv)
    for flag, given, known in (('--families', args.families, FAMILIES),
                               ('--pairs', args.pairs, PAIRS)):
        unknown = sorted(set(given or ()) - set(known))
        if unknown:
            parser.error(f'{flag} {unknown}: expected names among {sorted(known)}')
    args.selected = [pair for pair in PAIRS.values()
                     if (not args.families or pair.family in args.families)
                     and (not args.pairs or pair.key in args.pairs)]
    if not args.selected:
        parser.error(f'--families {args.families} and --pairs {args.pairs} select no pair')
    for pair in args.selected:
        for height, width in args.sizes or ():
            if height % pair.stride or width % pair.stride or min(height, width) < 1:
                parser.error(f'--sizes {height}x{width}: expected positive sides divisible by '
                             f'{pair.stride} (the stride of {pair.key})')
    if min(args.scales) <= 0 or args.batch < 1 or args.rounds < 0:
        parser.error(f'--scales {args.scales}, --batch {args.batch}, --rounds {args.rounds}: '
                     'expected positive scales and batch, and rounds >= 0')
    return args


def pair_sizes(pair: ModelPair,
               args: argparse.Namespace) -> Tuple[List[Tuple[int, int]], Tuple[int, int]]:
    """The sizes measured for ``pair`` (ascending) and the one standing for its training size."""
    if args.sizes:
        sizes = sorted(set(args.sizes), key=lambda s: s[0] * s[1])
        return sizes, sizes[-1]
    on_stride = [
        tuple(
            max(pair.stride, round(side * scale / pair.stride) * pair.stride)
            for side in pair.train_size
        )
        for scale in sorted(set(args.scales))
    ]
    return sorted(set(on_stride), key=lambda s: s[0] * s[1]), pair.train_size


def settings(pair: ModelPair, args: argparse.Namespace) -> Dict[str, object]:
    """What a pair's measurements depend on besides the code: a resumed run reuses an entry only if
    these are equal."""
    return {'sizes': [list(size) for size in pair_sizes(pair, args)[0]], 'batch': args.batch,
            'rounds': args.rounds, 'threads': args.threads}


def write_json(path: Path, data: dict) -> None:
    """``data`` into ``path`` through a temporary file renamed over it (never half written)."""
    scratch = path.with_name(f'.{path.name}.partial')
    scratch.write_text(json.dumps(data, indent=2))
    scratch.replace(path)


def measure_pair(pair: ModelPair, args: argparse.Namespace) -> Dict[str, object]:
    """Every size of ``pair`` in its own process; paired rounds at the training size."""
    sizes, train = pair_sizes(pair, args)
    entry = {'family': pair.family, 'project': pair.project, 'stock': pair.stock,
             'stock_label': pair.stock_label, 'deploy': pair.deploy, 'train_size': list(train),
             'sizes': [list(s) for s in sizes], 'settings': settings(pair, args),
             'memory': {'project': [], 'stock': []}, 'time': {'error': 'not measured'}}
    for index, size in enumerate(sizes):
        measured = in_child('train_pair', pair=pair.key, shape=list(size), batch=args.batch,
                            threads=args.threads,
                            warm_up_shape=[pair.stride * 2] * 2, reverse=index % 2 == 1,
                            macs=size == train, rounds=args.rounds if size == train else 0)
        for side in ('project', 'stock'):
            # a failed child: its error in both
            entry['memory'][side].append(measured.get(side, measured))
        if size == train:
            entry['time'] = measured.get('time', measured)
    entry['fit'] = {side: fit_and_predict(sizes, entry['memory'][side],
                                          pair.stride) for side in ('project', 'stock')}
    return entry


def fit_saved(pixels: Sequence[float], saved: Sequence[float]):
    """Coefficients ``(a, b, c)`` of ``a + b P + c P^2`` fitted to the saved bytes, ``c >= 0``;
    with fewer than three sizes, a line (or a constant per pixel)."""
    import numpy as np
    pixels, saved = np.asarray(pixels, float), np.asarray(saved, float)
    if len(pixels) >= 3:
        a, b, c = np.linalg.lstsq(np.stack([pixels ** 0, pixels, pixels ** 2], 1), saved,
                                  rcond=None)[0]
        if c >= 0:
            return float(a), float(b), float(c)
    if len(pixels) >= 2:
        a, b = np.linalg.lstsq(np.stack([pixels ** 0, pixels], 1), saved, rcond=None)[0]
        return float(a), float(b), 0.0
    return 0.0, float(saved[0] / pixels[0]), 0.0


def largest_side(coefficients, params: int, gigabytes: float, stride: int) -> int:
    """The largest square side on ``stride`` whose training memory fits ``gigabytes`` (or 0)."""
    a, b, c = coefficients

    def fits(side: int) -> bool:
        pixels = side * side
        return BYTES_PER_PARAMETER * params + a + b * pixels + c * pixels ** 2 <= gigabytes * 2**30
    low, high = 0, SATURATED_SIDE // stride
    while low < high:  # the largest multiple count that fits (memory grows with the side)
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle * stride) else (low, middle - 1)
    return low * stride


def fit_and_predict(sizes: Sequence[Tuple[int, int]], rows: Sequence[dict],
                    stride: int) -> Dict[str, object]:
    measured = [(h * w, row['saved_mb'] * 2**20) for (h, w),
                row in zip(sizes, rows) if 'saved_mb' in row]
    if not measured:
        return {'error': 'no size measured'}
    params = next(row['params'] for row in rows if 'params' in row)
    pixels, saved = zip(*measured)
    coefficients = fit_saved(pixels, saved)
    result = {'coefficients': coefficients,
              'largest_side': {str(gb): largest_side(coefficients, params, gb,
                                                     stride) for gb in GPU_GB}}
    if len(measured) >= 3:
        a, b, c = fit_saved(pixels[:-1], saved[:-1])
        result['extrapolation_error'] = (a + b * pixels[-1] + c * pixels[-1] ** 2) / saved[-1] - 1
    return result


def _at(entry: dict, side: str, size: Sequence[int]) -> dict:
    return entry['memory'][side][entry['sizes'].index(list(size))]


def _num(value, digits: int = 0, unit: str = '') -> str:
    return '-' if value is None else f'{value:,.{digits}f}{unit}'


def _both(mine: dict, stock: dict, field: str, digits: int, scale: float = 1.0) -> str:
    """``mine / stock`` of one measured field."""
    values = [row.get(field) for row in (mine, stock)]
    return ' / '.join(_num(None if value is None else value * scale, digits) for value in values)


def summary_table(results: Dict[str, dict]) -> List[str]:
    lines = ['| pair (project vs stock) | input | params M | GMACs / image (inference) | saved for '
             'backward MB | '
             'step s (paired) | saved ratio | time ratio | within 1.0x saved, 1.2x time |',
             '|---|---|---|---|---|---|---|---|---|']
    for key, entry in results.items():
        train = entry['train_size']
        mine, stock = _at(entry, 'project', train), _at(entry, 'stock', train)
        timing = entry['time'].get('ms', {})
        saved_ratio = mine.get('saved_mb', 0) / stock['saved_mb'] if stock.get('saved_mb') else None
        time_ratio = entry['time'].get('ratio', {}).get('project / stock')
        within = '-' if None in (saved_ratio, time_ratio) else (
            'yes' if saved_ratio <= 1.0 and time_ratio <= 1.2 else 'no')
        step = (f"{_num(timing['project'] / 1e3, 2)} / {_num(timing['stock'] / 1e3, 2)}" if timing
                else entry['time'].get('error', '-'))
        lines.append(f"| {key} vs {entry['stock_label']} | {train[0]}x{train[1]} | "
                     f"{_both(mine, stock, 'params', 2, 1e-6)} | {_both(mine, stock, 'gmacs', 2)} "
                     "| "
                     f"{_both(mine, stock, 'saved_mb', 0)} | {step} | {_num(saved_ratio, 2, 'x')} "
                     f"| {_num(time_ratio, 2, 'x')} | {within} |")
    return lines


def prediction_table(results: Dict[str, dict]) -> List[str]:
    header = ' | '.join(f'{gb} GB' for gb in GPU_GB)
    lines = [f'| model | fitted over | {header} | extrapolation error |',
             '|---|---|' + '---|' * len(GPU_GB) + '---|']
    for key, entry in results.items():
        sizes = ', '.join(f'{h}x{w}' for h, w in entry['sizes'])
        for side, label in (('project', key), ('stock', entry['stock_label'])):
            fit = entry['fit'][side]
            if 'error' in fit:
                lines.append(f'| {label} | {sizes} | {fit["error"]} |')
                continue
            sides = ' | '.join(_num(fit['largest_side'][str(gb)]) for gb in GPU_GB)
            extrapolation = _num(round(100 * fit.get('extrapolation_error', 0), 1) + 0.0, 1, ' %')
            lines.append(f'| {label} | {sizes} | {sides} | {extrapolation} |')
    return lines


def size_table(results: Dict[str, dict]) -> List[str]:
    lines = ['| model | input | saved for backward MB | peak RSS growth MB | one step s |',
             '|---|---|---|---|---|']
    for key, entry in results.items():
        for side, label in (('project', key), ('stock', entry['stock_label'])):
            for (height, width), row in zip(entry['sizes'], entry['memory'][side]):
                if 'error' in row:
                    lines.append(f'| {label} | {height}x{width} | error: {row["error"]} |')
                    continue
                lines.append(f"| {label} | {height}x{width} | {_num(row['saved_mb'])} | "
                             f"{_num(row['peak_mb'])} | {_num(row['step_s'], 2)} |")
    return lines


def tables(results: Dict[str, dict], batch: int, threads: int) -> str:
    sections = [
        [f'Training step (forward + backward, batch {batch}, synthetic targets), CPU {threads} '
         'threads; each cell project / stock at the training size.', ''] + summary_table(results),
        [f'Predicted largest square training input, batch {batch} (float32, AdamW; the method is '
         'in `benchmark_models.py`):', ''] + prediction_table(results),
        ['Per input size (one process per pair and size, the peak resident set reset before each '
         'step):', '']
        + size_table(results)]
    return '\n\n'.join('\n'.join(lines) for lines in sections) + '\n'


def plot(results: Dict[str, dict], path: Path) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    from mmvisattn.analysis.benchmark_attention import save_figure
    columns = min(4, len(results))
    rows = -(-len(results) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3.4 * rows), squeeze=False)
    for axis, (key, entry) in zip(axes.flat, results.items()):
        for side, label in (('project', key), ('stock', entry['stock_label'])):
            points = [(h * w / 1e6, row['saved_mb']) for (h, w),
                      row in zip(entry['sizes'], entry['memory'][side]) if 'saved_mb' in row]
            if points:
                axis.plot(*zip(*points), marker='o', label=label)
        axis.set(xlabel='input megapixels', ylabel='saved for backward, MB', title=key)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7)
    for axis in list(axes.flat)[len(results):]:
        axis.set_visible(False)
    save_figure(figure, path)


def main(argv=None) -> None:
    args = parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / 'results.json'
    previous = json.loads(path.read_text()) if args.resume and path.is_file() else {}
    # in PAIRS order below; a resumed run keeps the pairs it does not select
    results = dict(previous)
    measured = []
    for pair in args.selected:
        if previous.get(pair.key, {}).get('settings') == settings(pair, args):
            print(f'{pair.key}: kept from {path}', flush=True)
            continue
        print(f'{pair.key}: {pair.project} vs {pair.stock}', flush=True)
        results[pair.key] = measure_pair(pair, args)
        measured.append(pair.key)
        write_json(path, {key: results[key] for key in PAIRS if key in results})
    results = {key: results[key] for key in PAIRS if key in results}
    text = tables(results, args.batch, args.threads)
    print(text)
    write_json(path, results)
    (args.out_dir / 'tables.md').write_text(text)
    plot(results, args.out_dir / 'saved_bytes.png')
    print(f'wrote results.json, tables.md and saved_bytes.png into {args.out_dir}')
    # the record holds what this run measured (a pair kept by --resume is in an earlier one)
    if measured:
        record = cpu_record('bench_models',
                            dict(pairs={key: results[key] for key in measured}, batch=args.batch,
                                                 threads=args.threads))
        print('wrote the record '
              f'{", ".join(map(str, write_cpu_record(record, args.out_dir, args.record_dir)))}')
    errors = [key for key, entry in results.items() if 'error' in entry['time']
              or any('error' in row for rows in entry['memory'].values() for row in rows)]
    if errors:
        sys.exit(f'benchmark_models: measurements failed for {errors} (see the tables)')


if __name__ == '__main__':
    main()
