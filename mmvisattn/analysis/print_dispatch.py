"""Which backend of each op every attention layer of a config runs, and why not the others.

    python tools/analysis_tools/print_dispatch.py CONFIG [--device cpu|cuda] [--dtype
        float32|float16|bfloat16] [--context eager|compile|dispatch|trace|export] [--input-size H W]
        [--json OUT] [--cfg-options KEY=VALUE ...] [--cfg-new-keys]

One training-mode forward on the meta device at the test input size records every op call
(:func:`mmvisattn.ops.utils.dispatch.observing`), so any config answers in seconds without a GPU.
Each request is replayed for ``--device``, ``--dtype`` and ``--context`` (a training step,
``compile=True``, the FLOP counters, ONNX export); a layer whose named backend cannot run there
fails the run."""
import argparse
import contextlib
import json
import sys
from typing import Callable, Dict, Iterator, List, NamedTuple, Tuple

import torch
from mmengine.config import Config

from mmvisattn.analysis.input_size import test_input_size
from mmvisattn.launch import add_config_arguments, load_config
from mmvisattn.ops.utils.dispatch import CONTEXTS, Op, Request, UnsupportedInput, observing

DEVICES = ('cpu', 'cuda')
DTYPES = ('float32', 'float16', 'bfloat16')
RUNS = dict(eager='training step', compile='compiled training step',
            dispatch="torch's FLOP counter",
            trace="mmengine's FLOP counter (torch.jit)", export='ONNX export')


class Record(NamedTuple):
    """One op call: the op, the ``impl`` asked for, its request and the layer it was made in."""
    op: Op
    asked: str
    request: Request
    layer: str


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config')
    parser.add_argument('--device', default='cuda',
                        help=f'device to dispatch for: {", ".join(DEVICES)}')
    parser.add_argument('--dtype', default='float32',
                        help=f'inputs of the attention: {", ".join(DTYPES)}')
    parser.add_argument('--context', default='eager',
                        help=f'what runs the model: {", ".join(CONTEXTS)}')
    parser.add_argument('--input-size', type=int, nargs=2, metavar=('H', 'W'),
                        help='instead of the test size')
    parser.add_argument('--json', help='also write the rows to this file')
    add_config_arguments(parser)
    args = parser.parse_args(argv)
    for name, value, known in (('--device', args.device, DEVICES), ('--dtype', args.dtype, DTYPES),
                               ('--context', args.context, CONTEXTS)):
        if value not in known:
            raise SystemExit(f'error: {name} {value!r} is not known; expected one of '
                             f'{", ".join(known)}')
    return args


@contextlib.contextmanager
def recording(layer: List[str]) -> Iterator[List[Record]]:
    """Every op call made inside, in ``layer[0]``; each runs ``auto``'s choice (the meta device has
    none of the named backends' kernels)."""
    records: List[Record] = []

    def record(op: Op, impl: str, request: Request) -> Callable:
        records.append(Record(op, impl, request, layer[0]))
        return op.backends[op.choose('auto', request)].function

    with observing(record):
        yield records


def attention_requests(cfg: Config, hw_shape: Tuple[int, int]) -> List[Record]:
    """The op calls of one training-mode forward of the model's attention layers on meta tensors,
    each named after its attention module."""
    from mmvisattn.models.attentions.base import BaseAttention
    from mmvisattn.registry import build_from_config
    model = build_from_config(cfg).to('meta').train()
    inputs = torch.empty(1, 3, *hw_shape, device='meta')
    layer = ['']
    for name, module in model.named_modules():
        if isinstance(module, BaseAttention):
            module.register_forward_pre_hook(lambda module, args,
                                             name=name: layer.__setitem__(0, name))
    with recording(layer) as records:
        features = model.extract_feat(inputs)
        if hasattr(model, 'forward_transformer'):  # the DETR family: attention in the encoder
            from mmdet.structures import DetDataSample
            meta = dict(img_shape=hw_shape, batch_input_shape=hw_shape, pad_shape=hw_shape)
            model.forward_transformer(features, [DetDataSample(metainfo=meta)])
    return records


def replayed(request: Request, device: str, dtype: torch.dtype, context: str) -> Request:
    """``request`` on ``device`` in ``dtype`` (floating inputs only) under ``context``; traced and
    exported models run inference."""
    return request._replace(device=device,
                            dtype=dtype if request.dtype.is_floating_point else request.dtype,
                            context=context,
                            grad=request.grad and context not in ('trace', 'export'))


def dispatch_rows(records: List[Record], device: str, dtype: torch.dtype,
                  context: str = 'eager') -> List[Dict]:
    """One row per layer and op (consecutive repeats counted once): the request replayed on
    ``device`` in ``dtype`` under ``context``, the backend it runs and why no other."""
    rows, seen = [], set()
    for record in records:
        request = replayed(record.request, device, dtype, context)
        key = (record.layer, record.op.name, request)
        if key in seen:
            continue
        seen.add(key)
        chosen, passed_over = record.op.explain(request)
        row = dict(layer=record.layer, op=record.op.name, asked=record.asked,
                   request=request.describe(), runs=chosen, passed_over=passed_over)
        if record.asked != 'auto':
            row['runs'] = record.asked
            row['passed_over'] = {
                impl: reason
                for impl, reason in {
                    chosen: f'the config names {record.asked!r}',
                    **passed_over,
                }.items()
                if impl != record.asked
            }
            try:
                record.op.choose(record.asked, request)
            except UnsupportedInput as error:
                row['refused'] = str(error)
        rows.append(row)
    return rows


def format_rows(rows: List[Dict]) -> str:
    """Rows grouped by identical dispatch (the layers of a stage), in order of first appearance."""
    groups: Dict[str, List[str]] = {}
    for row in rows:
        runs = row['runs'] + (f' (asked; UNSUPPORTED: {row["refused"]})' if 'refused' in row else
                              ' (asked)' if row['asked'] != 'auto' else '')
        text = '\n'.join(
            [
                f'  {row["op"]} [{row["request"]}]',
                f'    runs: {runs}',
                *(f'    not {impl}: {reason}' for impl, reason in row['passed_over'].items()),
            ]
        )
        groups.setdefault(text, []).append(row['layer'])
    lines = []
    for text, layers in groups.items():
        named = (
            layers[0] if len(layers) == 1 else f'{len(layers)} layers: {layers[0]} ... {layers[-1]}'
        )
        lines.extend([named, text])
    return '\n'.join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    cfg = load_config(args.config, args.cfg_options, new_keys=args.cfg_new_keys)
    hw_shape, source = (tuple(args.input_size),
                        '--input-size') if args.input_size else test_input_size(cfg)
    rows = dispatch_rows(attention_requests(cfg, hw_shape), args.device, getattr(torch, args.dtype),
                         args.context)
    print(f'{args.config}: input {hw_shape[0]}x{hw_shape[1]} ({source}), {RUNS[args.context]} on '
          f'{args.device} in {args.dtype}; {len(rows)} op calls in '
          f'{len({row["layer"] for row in rows})} attention layers')
    print(format_rows(rows))
    if args.json:
        with open(args.json, 'w') as file:
            json.dump(dict(config=args.config, input_size=hw_shape, device=args.device,
                           dtype=args.dtype, context=args.context, rows=rows), file, indent=1)
    refused = [row['layer'] for row in rows if 'refused' in row]
    if refused:
        print(f'error: {len(refused)} layers name a backend that cannot run a {RUNS[args.context]} '
              f'on {args.device} in {args.dtype} (first: {refused[0]})', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
