"""Time and memory of registered attentions over growing token grids.

    python -m mmvisattn.analysis.benchmark_attention --types SoftmaxAttention LinearAttention \
        'SpatialReductionAttention:sr_ratio=8' --grids 16 32 64 128 --dims 96 --heads 3 --batch 4

A type is ``NAME`` or ``NAME:key=value,...`` of ``ATTENTIONS``, or a dotted import path of a module
with the same ``forward(x, hw_shape)`` (e.g.
``mmseg.models.backbones.mit.EfficientMultiheadAttention:sr_ratio=8``). Each (type, grid) runs in a
process of its own, so its peak memory is its own; times are medians of forward under ``no_grad``
and of forward + backward. Prints a table and fitted time exponents; writes ``results.json`` and
``scaling.png`` into ``--out-dir``."""
import argparse
import ast
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

from . import timing


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--types', nargs='+', default=['SoftmaxAttention', 'LinearAttention'],
                        help='attention types, each NAME or NAME:key=value,...')
    parser.add_argument('--grids', type=int, nargs='+', default=[16, 32, 64, 128],
                        help='grid sides H = W')
    parser.add_argument('--dims', type=int, default=96)
    parser.add_argument('--heads', type=int, default=3)
    parser.add_argument('--batch', type=int, default=4)
    parser.add_argument('--warmup', type=int, default=1)
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--threads', type=int, default=2, help='torch CPU threads')
    parser.add_argument('--device', default='cuda' if _cuda_available() else 'cpu')
    parser.add_argument('--timeout', type=float, default=900,
                        help='seconds allowed for one (type, grid)')
    parser.add_argument('--out-dir', type=Path, default=Path('work_dirs/benchmark_attention'))
    parser.add_argument('--one', nargs=2, metavar=('TYPE', 'GRID'), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.grids) < 1 or args.repeats < 1 or args.warmup < 0:
        parser.error('grids and --repeats must be positive and --warmup non-negative')
    return args


def _cuda_available() -> bool:
    import torch
    return torch.cuda.is_available()


def parse_type(spec: str) -> Dict:
    """``'Name:a=1,b=True'`` -> ``{'type': 'Name', 'a': 1, 'b': True}``."""
    name, _, options = spec.partition(':')
    cfg = dict(type=name)
    for item in filter(None, options.split(',')):
        key, sep, value = item.partition('=')
        if not sep:
            raise SystemExit(f'error: option {item!r} of type {spec!r} is not key=value')
        try:
            cfg[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            cfg[key.strip()] = value.strip()
    return cfg


def build_module(cfg: Dict, dims: int, heads: int):
    """An attention of ``ATTENTIONS``, or the class at a dotted import path."""
    from mmvisattn.registry import build_attention
    if '.' not in cfg['type']:
        return build_attention(cfg, embed_dims=dims, num_heads=heads)
    import importlib
    module_name, _, class_name = cfg.pop('type').rpartition('.')
    return getattr(importlib.import_module(module_name),
                   class_name)(embed_dims=dims, num_heads=heads, **cfg)


def measure_one(spec: str, grid: int, args: argparse.Namespace) -> Dict:
    """Build one attention and time it on a ``grid x grid`` map; runs inside the child process."""
    import torch

    import mmvisattn  # noqa: F401

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    module = build_module(parse_type(spec), args.dims, args.heads).to(device)
    if hasattr(module, 'switch_to_deploy'):
        module.switch_to_deploy()
    tokens = getattr(module, 'num_extra_tokens', 0) + grid * grid
    x = torch.randn(args.batch, tokens, args.dims, device=device, requires_grad=True)
    hw_shape = (grid, grid)
    cuda = device.type == 'cuda'

    def forward() -> None:
        with torch.no_grad():
            module(x, hw_shape)

    def forward_backward() -> None:
        module(x, hw_shape).sum().backward()

    ms = {}

    def timed() -> None:
        for name, step in (('fwd_ms', forward), ('fwd_bwd_ms', forward_backward)):
            ms[name] = timing.median_ms(step, args.repeats, args.warmup, cuda)

    peak = timing.peak_growth_mb(timed, cuda)
    return dict(type=spec, grid=grid, tokens=tokens, **ms, peak_mb=peak, device=args.device,
                complexity=getattr(module, 'complexity', 'quadratic'))


def run_case(spec: str, grid: int, args: argparse.Namespace) -> Dict:
    """Run :func:`measure_one` in a process of its own; failures become rows with an ``error``."""
    command = [sys.executable, '-m', 'mmvisattn.analysis.benchmark_attention', '--one', spec,
               str(grid), '--dims', str(args.dims), '--heads', str(args.heads), '--batch',
               str(args.batch), '--warmup', str(args.warmup), '--repeats', str(args.repeats),
               '--threads', str(args.threads), '--device', args.device]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return dict(type=spec, grid=grid, error=f'timeout after {args.timeout:.0f} s')
    rows = [line for line in done.stdout.splitlines() if line.startswith('{')]
    if done.returncode or not rows:
        lines = done.stderr.strip().splitlines() or [f'exit code {done.returncode}']
        return dict(type=spec, grid=grid, error=lines[-1][:200])
    return json.loads(rows[-1])


def fitted_exponent(rows: List[Dict], key: str) -> Optional[float]:
    """Least-squares slope of ``log(row[key])`` against ``log(tokens)``."""
    points = [(math.log(r['tokens']), math.log(r[key])) for r in rows if key in r and r[key] > 0]
    if len(points) < 2:
        return None
    mean_x = sum(p[0] for p in points) / len(points)
    mean_y = sum(p[1] for p in points) / len(points)
    spread = sum((p[0] - mean_x) ** 2 for p in points)
    return sum((p[0] - mean_x) * (p[1] - mean_y) for p in points) / spread if spread else None


def format_table(rows: List[Dict], exponents: Dict[str, Dict]) -> str:
    header = (f'{"type":<44} {"grid":>6} {"tokens":>7} {"fwd ms":>9} {"fwd+bwd ms":>11} '
              f'{"peak MB":>9}')
    lines = [header, '-' * len(header)]
    for row in rows:
        if 'error' in row:
            lines.append(f'{row["type"]:<44} {row["grid"]:>6} {"":>7} error: {row["error"]}')
        else:
            lines.append(f'{row["type"]:<44} {row["grid"]:>6} {row["tokens"]:>7} '
                         f'{row["fwd_ms"]:>9.1f} {row["fwd_bwd_ms"]:>11.1f} {row["peak_mb"]:>9.1f}')
    lines.append('')
    for spec, exps in exponents.items():
        text = ', '.join(f'{k} {v:.2f}' if v is not None else f'{k} n/a' for k, v in exps.items())
        lines.append(f'time exponent of {spec}: {text}')
    return '\n'.join(lines)


def plot(rows: List[Dict], path: Path) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    figure, (time_axis, memory_axis) = plt.subplots(1, 2, figsize=(12, 4.5))
    for spec in dict.fromkeys(r['type'] for r in rows):
        ok = [r for r in rows if r['type'] == spec and 'error' not in r]
        if not ok:
            continue
        tokens = [r['tokens'] for r in ok]
        time_axis.plot(tokens, [r['fwd_bwd_ms'] for r in ok], marker='o', label=spec)
        memory_axis.plot(tokens, [max(r['peak_mb'], 1e-2) for r in ok], marker='o', label=spec)
    for axis, label in ((time_axis, 'forward + backward, ms'),
                        (memory_axis, 'peak memory growth, MB')):
        log_axes(axis, label)
    time_axis.legend(fontsize=7)
    save_figure(figure, path)


def log_axes(axis, ylabel: str, title: str = '') -> None:
    """Log-log axes over the number of tokens, with a light grid."""
    axis.set(xscale='log', yscale='log', xlabel='tokens', ylabel=ylabel, title=title)
    axis.grid(True, which='both', alpha=0.3)


def save_figure(figure, path: Path) -> None:
    import matplotlib.pyplot as plt
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.one[0], int(args.one[1]), args)))
        return
    from tqdm import tqdm

    cases = [(spec, grid) for spec in args.types for grid in sorted(args.grids)]
    rows = []
    for spec, grid in tqdm(cases, desc='benchmark', unit='case', file=sys.stderr):
        rows.append(run_case(spec, grid, args))
    exponents = {spec: {key: fitted_exponent([r for r in rows if r['type'] == spec], key)
                        for key in ('fwd_ms', 'fwd_bwd_ms')} for spec in args.types}
    print(format_table(rows, exponents))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k not in ('one', 'out_dir')}
    (args.out_dir / 'results.json').write_text(json.dumps(
        dict(settings=settings, rows=rows, exponents=exponents), indent=2))
    plot(rows, args.out_dir / 'scaling.png')
    print(f'wrote {args.out_dir / "results.json"} and {args.out_dir / "scaling.png"}')
    if any('error' in r for r in rows):
        sys.exit(1)


if __name__ == '__main__':
    main()
