"""Images per second of every family's demo beside its stock twin (``make bench-demos``), each by
``tools/analysis_tools/benchmark.py`` (random weights, the shapes test set, one image at a time,
CPU) in a fresh process:

    python tools/analysis_tools/benchmark_demos.py [--pairs NAME ...] [--max-iter 40] [--num-warmup
        5] [--rounds 3] [--out-dir work_dirs/bench_demos] [--record-dir docs/records/bench_demos]

Run where ``data/shapes`` is. The twin is the stock model the demo's attention or backbone replaces,
with the demo's heads and recipe (a ``configs/demo`` config, or the demo with its backbone swapped
back by ``--cfg-options``). The two run in rounds of alternating order; each figure is the median of
its rounds. Writes ``results.json`` and the record into ``--out-dir`` (and ``--record-dir``), which
``docs/user_guides/inference.md`` renders."""
import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Dict, List, NamedTuple, Sequence, Tuple

from lab.bench.processes import run_or_raise

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / 'tools' / 'analysis_tools' / 'benchmark.py'
SEGFORMER_B0 = 'demo/segformer_mit-b0_1xb8-600i_shapes-cityscapes-128.py'
SMCA = 'smca/smca_r18_1xb8-600i_shapes-coco-128.py'
PICODET = 'picodet/picodet-s_castling_1xb16-600i_shapes-coco-128.py'
PERVIT = 'pervit/mask-rcnn_pervit-t_simplefpn_1xb8-600i_shapes-coco-128.py'


class DemoPair(NamedTuple):
    """A demo (a config under ``configs/`` and its ``--cfg-options``) beside its stock twin."""
    demo: str
    demo_options: Tuple[str, ...]
    stock: str
    stock_options: Tuple[str, ...]
    stock_label: str


PAIRS: Dict[str, DemoPair] = {
    'SMCA-Ripple': DemoPair(
        SMCA, ('model.encoder.layer_cfg.attn_cfg.type=RippleAttention',), SMCA, (),
        'SMCA (softmax attention)',
    ),
    'ViL': DemoPair(
        'vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py', (),
        'demo/retinanet_r18_fpn_1xb8-600i_shapes-coco-128.py', (), 'RetinaNet R-18',
    ),
    'Segformer-RWGKA': DemoPair(
        'segformer_rwgka/segformer_mit-b0-rwgka_1xb8-600i_shapes-cityscapes-128.py', (),
        SEGFORMER_B0, (), 'SegFormer-B0',
    ),
    'Castling': DemoPair(
        'castling/segformer-head_castling-levit-s_1xb8-600i_shapes-cityscapes-128.py', (),
        SEGFORMER_B0, (), 'SegFormer-B0',
    ),
    'PicoDet-Castling': DemoPair(
        PICODET, (), PICODET, ('model.backbone.type=ESNet', 'model.neck.in_channels=[96,192,384]'),
        'PicoDet-S ESNet',
    ),
    'PerViT': DemoPair(
        PERVIT, (), PERVIT,
        (
            'model.backbone._delete_=True', 'model.backbone.type=ResNet', 'model.backbone.depth=18',
            'model.backbone.norm_cfg.type=BN', 'model.neck._delete_=True', 'model.neck.type=FPN',
            'model.neck.in_channels=[64,128,256,512]', 'model.neck.out_channels=128',
            'model.neck.num_outs=5',
        ),
        'Mask R-CNN R-18 FPN',
    ),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--pairs', nargs='+', default=list(PAIRS), choices=list(PAIRS),
                        metavar='NAME',
                        help=f'the pairs to measure (default: all of {", ".join(PAIRS)})')
    parser.add_argument('--max-iter', type=int, default=40,
                        help='images timed per run, after the warm-up')
    parser.add_argument('--num-warmup', type=int, default=5, help='images run before the timing')
    parser.add_argument('--rounds', type=int, default=3,
                        help='runs of each side, in alternating order')
    parser.add_argument('--out-dir', type=Path, default=Path('work_dirs/bench_demos'))
    parser.add_argument('--record-dir', type=Path, help='also write the record here under its name')
    args = parser.parse_args(argv)
    for name, least in (('max_iter', 1), ('num_warmup', 0), ('rounds', 1)):
        if getattr(args, name) < least:
            parser.error(f'--{name.replace("_", "-")} must be at least {least}, got '
                         f'{getattr(args, name)}')
    return args


def images_per_second(config: str, options: Sequence[str], work_dir: Path,
                      args: argparse.Namespace) -> float:
    """One run of ``benchmark.py`` in a child process, its output in ``work_dir/benchmark.log``; a
    failure raises its one line after the config and options."""
    command = [sys.executable, TOOL, REPO / 'configs' / config, '--device', 'cpu', '--max-iter',
               args.max_iter, '--num-warmup', args.num_warmup, '--log-interval', args.max_iter,
               '--work-dir', work_dir]
    if options:
        command += ['--cfg-new-keys', '--cfg-options', *options]
    run_or_raise(command, work_dir / 'benchmark.log', label=' '.join([config, *options]))
    return json.loads((work_dir / 'benchmark.json').read_text())['fps']


def measure_pair(name: str, args: argparse.Namespace) -> Dict:
    """Both sides of pair ``name`` over ``args.rounds`` alternating rounds: each run's images per
    second and the medians."""
    pair = PAIRS[name]
    sides = dict(demo=(pair.demo, pair.demo_options), stock=(pair.stock, pair.stock_options))
    runs: Dict[str, List[float]] = dict(demo=[], stock=[])
    for round_number in range(args.rounds):
        order = ('demo', 'stock') if round_number % 2 == 0 else ('stock', 'demo')
        for side in order:
            work_dir = args.out_dir / name / f'{side}_{round_number}'
            runs[side].append(images_per_second(*sides[side], work_dir, args))
    return dict(pair._asdict(), demo_fps=statistics.median(runs['demo']),
                stock_fps=statistics.median(runs['stock']),
                demo_runs=runs['demo'], stock_runs=runs['stock'])


def table(results: Dict) -> str:
    """The pairs' table in Markdown."""
    lines = ['Images per second on the CPU (`tools/analysis_tools/benchmark.py`, random weights, '
             'batch 1, 128x128 shapes images, data loading and post-processing included): the '
             f'median of {results["rounds"]} runs of {results["max_iter"]} images each.', '',
             '| demo | images/s | stock twin | images/s | demo / twin |', '|---|---|---|---|---|']
    for name, row in results['pairs'].items():
        lines.append(f'| {name} (`{Path(row["demo"]).name}`) | {row["demo_fps"]:.2f} | '
                     f'{row["stock_label"]} | '
                     f'{row["stock_fps"]:.2f} | {row["demo_fps"] / row["stock_fps"]:.2f} |')
    return '\n'.join(lines) + '\n'


def main(argv=None) -> None:
    from mmvisattn.analysis.records import cpu_record, write_cpu_record
    args = parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    results: Dict = dict(max_iter=args.max_iter, num_warmup=args.num_warmup, rounds=args.rounds,
                         pairs={})
    for name in args.pairs:
        results['pairs'][name] = measure_pair(name, args)
        print(f'{name}: {results["pairs"][name]["demo_fps"]:.2f} against '
              f'{results["pairs"][name]["stock_fps"]:.2f} images/s', flush=True)
        (args.out_dir / 'results.json').write_text(json.dumps(results, indent=1))
    print(table(results))
    record = cpu_record('bench_demos', results)
    print('wrote the record '
          f'{", ".join(map(str, write_cpu_record(record, args.out_dir, args.record_dir)))}')
