"""The side-by-side benchmark of the docs' records (``make bench``): every attention beside SDPA,
mmseg's SRA and, with ``--peers``, the official modules; then whole models.

    python tools/analysis_tools/benchmark_suite.py [--peers PEERS_DIR] [--out-dir work_dirs/bench]
        [--only ops memory models] [--rounds 25] [--record-dir docs/records/bench]

``PEERS_DIR`` holds the official checkouts as ``owner+name`` folders; without it the official
columns are left out.

* **Time** (CPU, 2 threads): forward + backward in rounds of alternating order per grid; the ratio
  is the median of per-round ratios.
* **Memory**: the peak resident set's growth over one step, each module and grid in a fresh process
  after an 8x8 warm-up step.
* **Models**: one image of inference (raw head outputs; the backbone beside it), paired in rounds
  against the group's first model.

Prints Markdown tables and writes ``results.json``, ``tables.md``, ``bench.png`` and the record into
``--out-dir`` (and ``--record-dir``, rendered by ``docs/records/benchmarks.md``).
"""
import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Dict

from lab.bench.measure import OFFICIAL_REPOS, in_child, runnable
from lab.bench.report import model_tables, op_tables, plot
from lab.bench.suite_cases import MODEL_GROUPS, OP_CASES
from mmvisattn.analysis.records import cpu_record, write_cpu_record


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--peers', type=Path,
                        help='folder of owner+name checkouts of the official repositories')
    parser.add_argument('--only', nargs='+', choices=('ops', 'memory', 'models'),
                        default=['ops', 'memory', 'models'])
    parser.add_argument('--rounds', type=int, default=25,
                        help='paired rounds per op and grid (at most; '
                        'small grids run them all, large ones stop at --budget)')
    parser.add_argument('--budget', type=float, default=40,
                        help='seconds of rounds per op and grid (at least 3)')
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--cases', nargs='+', metavar='KEY',
                        help='op and model keys to run (default: all): '
                        + ', '.join(c.key for c in OP_CASES + MODEL_GROUPS))
    parser.add_argument('--grids', type=int, nargs='+',
                        help='one list of grid sides for every op (a quick run)')
    parser.add_argument('--shape', type=int, nargs=2, metavar=('H', 'W'),
                        help='one input size for every model')
    parser.add_argument('--out-dir', type=Path, default=Path('work_dirs/bench'))
    parser.add_argument('--record-dir', type=Path,
                        help='also write the record there, under its name')
    args = parser.parse_args(argv)
    unknown = set(args.cases or ()) - {c.key for c in OP_CASES + MODEL_GROUPS}
    if unknown:
        parser.error(f'--cases {sorted(unknown)}: expected keys among '
                     f'{[c.key for c in OP_CASES + MODEL_GROUPS]}')
    if args.peers is not None and not args.peers.is_dir():
        parser.error(f'--peers {args.peers}: not a folder')
    needing_einops = [key for key in ('vil', 'pervit') if key in (args.cases or OFFICIAL_REPOS)]
    if args.peers is not None and needing_einops and importlib.util.find_spec('einops') is None:
        parser.error(f'--peers: the official {" and ".join(needing_einops)} code imports einops; '
                     'install it with `pip install einops`')
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    peers = str(args.peers.resolve()) if args.peers else None
    common = dict(threads=args.threads, peers=peers)
    results: Dict[str, dict] = {'settings': {'threads': args.threads, 'peers': peers,
                                             'rounds': args.rounds},
                                'ops': {}, 'models': {}}
    started = time.perf_counter()
    for index, case in enumerate(OP_CASES):
        if args.cases and case.key not in args.cases:
            continue
        grids = args.grids or case.grids
        entry = results['ops'].setdefault(str(index), {'title': case.title, 'grids': grids,
                                                       'time': {}, 'memory': {}})
        for grid in grids:
            if 'ops' in args.only:
                entry['time'][str(grid)] = in_child('time', case=index, grid=grid,
                                                    rounds=args.rounds,
                                                    budget=args.budget, **common)
            if 'memory' in args.only:
                specs = {**case.ours, **{p: case.peers[p] for p in case.memory_peers}}
                entry['memory'][str(grid)] = {
                    label: in_child('memory', case=index, grid=grid, spec=spec, **common)
                    for label, spec in runnable(specs, peers).items()
                }
            print(f'[{time.perf_counter() - started:6.0f} s] {case.title.split(" (")[0]} '
                  f'{grid}x{grid}', file=sys.stderr, flush=True)
    if 'models' in args.only:
        for index, group in enumerate(MODEL_GROUPS):
            if args.cases and group.key not in args.cases:
                continue
            shape = args.shape or group.shape
            results['models'][str(index)] = {
                'title': group.title, 'shape': shape, 'threads': args.threads,
                'time': in_child('models', group=index, shape=shape, **common),
                'memory': {label: in_child('model_memory', group=index, label=label, shape=shape,
                                           **common)
                           for label in group.configs}}
            print(
                f'[{time.perf_counter() - started:6.0f} s] {group.title} at {shape[0]}x{shape[1]}',
                file=sys.stderr, flush=True,
            )
    results['seconds'] = time.perf_counter() - started
    text = tables(results)
    print(text)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / 'results.json').write_text(json.dumps(results, indent=2))
    (args.out_dir / 'tables.md').write_text(text)
    plot(results, args.out_dir / 'bench.png')
    written = write_cpu_record(cpu_record('bench', results), args.out_dir, args.record_dir)
    print(f'wrote {args.out_dir}/results.json, tables.md, bench.png and '
          f'{", ".join(map(str, written))} in {results["seconds"]:.0f} s')


def tables(results: Dict) -> str:
    """The Markdown of a run's ``results.json`` (the docs build renders a record's with it)."""
    return '\n'.join(op_tables(results['ops']) + model_tables(results['models'])).strip() + '\n'


if __name__ == '__main__':
    main()
