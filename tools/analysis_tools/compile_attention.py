"""Does ``torch.compile`` take each registered attention? Forward and backward, against eager.

    python tools/analysis_tools/compile_attention.py [--types NAME ...] [--backend inductor]
        [--grid 12 12] [--dims 32] [--heads 2] [--out-dir DIR]

For every type (default: all of ``ATTENTIONS``), on CPU: the graph breaks Dynamo finds
(``torch._dynamo.explain``) with their reasons, then ``torch.compile(module, backend=...)`` run
forward and backward on the same input and upstream gradient as the eager module, and the largest
norm-wise relative error of the output and of all gradients (the input's and every parameter's).
Prints a table, writes ``compile.json`` into ``--out-dir`` and exits 1 when a type fails to
compile or differs from eager by more than ``--rtol``. ``inductor`` generates and builds C++ (tens
of seconds per type on two cores); ``aot_eager`` traces the same graphs and autograd without code
generation.
"""
import argparse
import json
import sys
import time
from pathlib import Path
from typing import Dict, List


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--types', nargs='+',
                        help='attention types (default: every registered one)')
    parser.add_argument('--backend', default='inductor',
                        help='torch.compile backend (inductor, aot_eager, ...)')
    parser.add_argument('--grid', type=int, nargs=2, default=[12, 12], metavar=('H', 'W'))
    parser.add_argument('--dims', type=int, default=32)
    parser.add_argument('--heads', type=int, default=2)
    parser.add_argument('--rtol', type=float, default=1e-4,
                        help='largest relative error accepted (float32)')
    parser.add_argument('--out-dir', type=Path, default=Path('work_dirs/compile_attention'))
    return parser.parse_args(argv)


def relative_error(compiled, eager) -> float:
    return ((compiled - eager).norm() / eager.norm().clamp_min(1e-12)).item()


def forward_backward(module, x, hw_shape, upstream) -> List:
    """Output and all gradients (the input's, then the parameters') as one vector, of one step
    (dropout and random draws seeded)."""
    import torch
    x = x.clone().requires_grad_(True)
    module.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    out = module(x, hw_shape)
    (out * upstream).sum().backward()
    grads = [x.grad, *(p.grad for p in module.parameters() if p.grad is not None)]
    return [out.detach(), torch.cat([grad.flatten() for grad in grads])]


def check_type(attn_type: str, args: argparse.Namespace) -> Dict:
    """One row: graph breaks, whether the compiled module ran, its error against eager, compile
    time."""
    import torch

    from mmvisattn.registry import build_attention
    torch._dynamo.reset()
    torch.manual_seed(0)
    attn = build_attention(dict(type=attn_type), embed_dims=args.dims, num_heads=args.heads).train()
    hw_shape = tuple(args.grid)
    x = torch.randn(2, attn.num_extra_tokens + hw_shape[0] * hw_shape[1], args.dims)
    upstream = torch.randn_like(x)
    explained = torch._dynamo.explain(attn)(x, hw_shape)
    reasons = sorted({str(b.reason).strip().splitlines()[0] for b in explained.break_reasons})
    row = dict(type=attn_type, backend=args.backend, graph_breaks=explained.graph_break_count,
               reasons=reasons)
    torch._dynamo.reset()
    eager = forward_backward(attn, x, hw_shape, upstream)
    start = time.perf_counter()
    try:
        compiled = forward_backward(torch.compile(attn, backend=args.backend), x, hw_shape,
                                    upstream)
    # any failure to compile or run is this tool's finding, reported per type
    except Exception as exc:
        return dict(row, error=f'{type(exc).__name__}: '
                    f'{str(exc).strip().splitlines()[0] if str(exc).strip() else ""}')
    return dict(row, compile_s=round(time.perf_counter() - start, 1),
                max_relative_error=max(relative_error(c, e) for c, e in zip(compiled, eager)))


def format_table(rows: List[Dict], rtol: float) -> str:
    header = ('type', 'backend', 'graph breaks', 'runs fwd+bwd', 'max rel. error', 'compile s',
              'break reasons')
    lines = [(row['type'], row['backend'], str(row['graph_breaks']),
              'no: ' + row['error'] if 'error' in row else 'yes', f'{row["max_relative_error"]:.1e}'
              + (' > rtol' if row['max_relative_error'] > rtol else '')
              if 'max_relative_error' in row else '-', str(row.get('compile_s', '-')),
              '; '.join(row['reasons']))
             for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(header, *lines)]
    return '\n'.join(
        '  '.join(cell.ljust(width) for cell, width in zip(line, widths))
        for line in [header, *lines]
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    import mmvisattn  # noqa: F401  (registers the attentions)
    from mmvisattn.registry import ATTENTIONS
    types = args.types or sorted(ATTENTIONS.module_dict)
    unknown = [name for name in types if name not in ATTENTIONS.module_dict]
    if unknown:
        print(f'error: unknown attention type {", ".join(unknown)}; registered: '
              f'{", ".join(sorted(ATTENTIONS.module_dict))}', file=sys.stderr)
        return 2
    rows = [check_type(name, args) for name in types]
    print(format_table(rows, args.rtol))
    failed = [row['type'] for row in rows if 'error' in row
              or row['max_relative_error'] > args.rtol]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / 'compile.json').write_text(
        json.dumps(dict(settings={k: str(v) for k, v in vars(args).items()}, rows=rows), indent=1)
    )
    print(f'{len(rows) - len(failed)} of {len(rows)} types compile and equal eager within '
          f'{args.rtol:g}; wrote {args.out_dir / "compile.json"}')
    if failed:
        print(f'error: {", ".join(failed)} failed to compile or differ from eager', file=sys.stderr)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
