"""Which implementation of each op every attention layer of a config runs, and why not the others.

    python tools/analysis_tools/print_dispatch.py CONFIG [--device cpu|cuda] [--dtype float32|float16|bfloat16]
        [--input-size H W] [--json OUT] [--cfg-options KEY=VALUE ...] [--cfg-new-keys]

The model is built on the meta device and its attention layers run one training-mode forward at the
config's test input size with no data (:func:`mmvisattn.ops.utils.dispatch.record_dispatch` in a dry
run: every op records its request and returns at once), so any config, at any size, is answered in
seconds on a machine without a GPU. Each request is then replayed for ``--device`` and ``--dtype``
(the inputs' dtype under that autocast): the implementation ``impl='auto'`` would run there, or the
one the config names, and for every other implementation the reason it was passed over. A layer
whose named implementation refuses the device fails the run (exit 1).

The test input size is the test pipeline's ``Resize`` scale as (shorter, longer) side, the crop of a
``mode='slide'`` segmentor, padded to the data preprocessor's ``pad_size_divisor`` (COCO's 1333x800
runs at 800x1344); ``--input-size`` overrides it.
"""
import argparse
import json
import sys
from typing import Dict, List, Tuple

import torch
from mmengine.config import Config

from mmvisattn.analysis.input_size import test_input_size
from mmvisattn.launch import add_config_arguments, load_config

DEVICES = ('cpu', 'cuda')
DTYPES = ('float32', 'float16', 'bfloat16')


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config')
    parser.add_argument('--device', default='cuda', help=f'device to dispatch for: {", ".join(DEVICES)}')
    parser.add_argument('--dtype', default='float32', help=f'inputs of the attention: {", ".join(DTYPES)}')
    parser.add_argument('--input-size', type=int, nargs=2, metavar=('H', 'W'), help='instead of the test size')
    parser.add_argument('--json', help='also write the rows to this file')
    add_config_arguments(parser)
    args = parser.parse_args(argv)
    for name, value, known in (('--device', args.device, DEVICES), ('--dtype', args.dtype, DTYPES)):
        if value not in known:
            raise SystemExit(f'error: {name} {value!r} is not known; expected one of {", ".join(known)}')
    return args


def attention_requests(cfg: Config, hw_shape: Tuple[int, int]):
    """The dispatch records of one training-mode forward of the model's attention layers on meta
    tensors, each named after its attention module."""
    from mmvisattn.models.attentions.base import BaseAttention
    from mmvisattn.ops.utils.dispatch import record_dispatch
    from mmvisattn.registry import build_from_config
    model = build_from_config(cfg).to('meta').train()
    inputs = torch.empty(1, 3, *hw_shape, device='meta')
    with record_dispatch(dry_run=True) as log:
        for name, module in model.named_modules():
            if isinstance(module, BaseAttention):
                module.register_forward_pre_hook(lambda module, args, name=name: setattr(log, 'layer', name))
        features = model.extract_feat(inputs)
        if hasattr(model, 'forward_transformer'):  # the DETR family: attention in the encoder
            from mmdet.structures import DetDataSample
            meta = dict(img_shape=hw_shape, batch_input_shape=hw_shape, pad_shape=hw_shape)
            model.forward_transformer(features, [DetDataSample(metainfo=meta)])
    return log.records


def dispatch_rows(records, device: str, dtype: torch.dtype) -> List[Dict]:
    """One row per layer and op (consecutive repeats, such as a feature map of the queries and of the
    keys, counted once): the request replayed on ``device`` in ``dtype``, the implementation it runs
    and why each other one does not."""
    rows, seen = [], set()
    for record in records:
        request = record.request.on(device, dtype if record.request.dtype.is_floating_point else None)
        key = (record.layer, record.op.name, request)
        if key in seen:
            continue
        seen.add(key)
        chosen, passed_over = record.op.explain(request)
        row = dict(layer=record.layer, op=record.op.name, asked=record.asked, request=request.describe(),
                   runs=chosen, passed_over=passed_over)
        if record.asked != 'auto':
            refusal = record.op.refusal(record.asked, request)
            row['runs'] = record.asked
            row['passed_over'] = {impl: reason for impl, reason in {chosen: f'the config names {record.asked!r}',
                                                                    **passed_over}.items() if impl != record.asked}
            if refusal is not None and not refusal.startswith('not in auto'):
                row['refused'] = refusal
        rows.append(row)
    return rows


def format_rows(rows: List[Dict]) -> str:
    """Rows grouped by identical dispatch (the layers of a stage), in order of first appearance."""
    groups: Dict[str, List[str]] = {}
    for row in rows:
        runs = row['runs'] + (f' (asked; REFUSES: {row["refused"]})' if 'refused' in row else
                              ' (asked)' if row['asked'] != 'auto' else '')
        text = '\n'.join([f'  {row["op"]} [{row["request"]}]', f'    runs: {runs}',
                          *(f'    not {impl}: {reason}' for impl, reason in row['passed_over'].items())])
        groups.setdefault(text, []).append(row['layer'])
    lines = []
    for text, layers in groups.items():
        named = layers[0] if len(layers) == 1 else f'{len(layers)} layers: {layers[0]} ... {layers[-1]}'
        lines.extend([named, text])
    return '\n'.join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    cfg = load_config(args.config, args.cfg_options, new_keys=args.cfg_new_keys)
    hw_shape, source = (tuple(args.input_size), '--input-size') if args.input_size else test_input_size(cfg)
    rows = dispatch_rows(attention_requests(cfg, hw_shape), args.device, getattr(torch, args.dtype))
    print(f'{args.config}: input {hw_shape[0]}x{hw_shape[1]} ({source}), training step on {args.device} in '
          f'{args.dtype}; {len(rows)} op calls in {len({row["layer"] for row in rows})} attention layers')
    print(format_rows(rows))
    if args.json:
        with open(args.json, 'w') as file:
            json.dump(dict(config=args.config, input_size=hw_shape, device=args.device, dtype=args.dtype, rows=rows),
                      file, indent=1)
    refused = [row['layer'] for row in rows if 'refused' in row]
    if refused:
        print(f'error: {len(refused)} layers name an implementation that refuses {args.device} {args.dtype} '
              f'(first: {refused[0]})', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
