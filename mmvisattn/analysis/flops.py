"""Parameters and FLOPs (multiply-accumulates) of a config, attention matmuls and linear solves
counted, with a break-down by operator.

    python tools/analysis_tools/get_flops.py CONFIG [--shape H W] [--deploy] [--json OUT]

Without ``--shape`` the test input size is counted; ``--deploy`` calls ``switch_to_deploy()``
first."""
import argparse
import inspect
import json
from typing import Dict

import torch
from mmengine.config import Config

import mmvisattn  # noqa: F401
from mmvisattn.analysis.input_size import test_input_size
from mmvisattn.deploy import switch_to_deploy
from mmvisattn.launch import add_config_arguments, load_config
from mmvisattn.registry import build_from_config
from mmvisattn.utils import count_flops, count_parameters


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config')
    parser.add_argument('--shape', type=int, nargs='+',
                        help="input H W (or one side); default: the config's test "
                        'input size (its test pipeline\'s Resize scale, or its slide crop)')
    parser.add_argument('--deploy', action='store_true',
                        help='count the model after switch_to_deploy()')
    parser.add_argument('--json', help='also write the figures to this file')
    add_config_arguments(parser)
    args = parser.parse_args(argv)
    if args.shape is not None and len(args.shape) == 1:
        args.shape = args.shape * 2
    if args.shape is not None and (len(args.shape) != 2 or min(args.shape) < 1):
        parser.error(f'--shape takes one or two positive sides, got {args.shape}')
    return args


def build_model(cfg: Config) -> torch.nn.Module:
    return build_from_config(cfg).eval()


def tensor_forward(model: torch.nn.Module, scope: str, height: int, width: int):
    """A closure running the model's ``mode='tensor'`` forward on one ``3 x H x W`` image."""
    inputs = torch.zeros(1, 3, height, width)
    meta = dict(img_shape=(height, width), ori_shape=(height, width), pad_shape=(height, width),
                batch_input_shape=(height, width), scale_factor=(1.0, 1.0))
    if scope == 'mmdet':
        from mmdet.structures import DetDataSample
        samples = [DetDataSample(metainfo=meta)]
        return lambda: model(inputs, samples, mode='tensor')
    from mmseg.structures import SegDataSample
    samples = [SegDataSample(metainfo=meta)]
    head = model.decode_head
    if 'batch_data_samples' in inspect.signature(head.forward).parameters:
        # query-based heads (Mask2Former) need the image metas mmseg's tensor mode does not pass
        return lambda: head(model.extract_feat(inputs), samples)
    return lambda: model(inputs, samples, mode='tensor')


def measure(config: str, shape=None, deploy: bool = False, cfg_options=None,
            new_keys: bool = False) -> Dict:
    """Parameters and multiply-accumulates of the config's model on one ``shape`` image (default:
    the config's test input size)."""
    return dict(config=config, **measure_config(load_config(config, cfg_options, new_keys=new_keys),
                                                shape, deploy))


def measure_config(cfg: Config, shape=None, deploy: bool = False) -> Dict:
    """:func:`measure` of a loaded config."""
    shape = tuple(shape) if shape else test_input_size(cfg, '--shape')[0]
    model = build_model(cfg)
    if deploy:
        switch_to_deploy(model)
    macs = count_flops(tensor_forward(model, cfg.default_scope, *shape))
    parts = {name: count_parameters(getattr(model, name))
             for name in ('backbone', 'neck', 'decode_head', 'bbox_head', 'rpn_head', 'roi_head')
             if isinstance(getattr(model, name, None), torch.nn.Module)}
    return dict(shape=list(shape), deploy=deploy, params=count_parameters(model),
                params_by_part=parts, gmacs=macs.pop('total') / 1e9,
                gmacs_by_op={op: n / 1e9 for op, n in sorted(macs.items(), key=lambda kv: -kv[1])})


def main(argv=None) -> None:
    args = parse_args(argv)
    result = measure(args.config, args.shape, args.deploy, args.cfg_options, args.cfg_new_keys)
    print(f'config: {args.config}')
    height, width = result['shape']
    print(f'input: {height}x{width}{" (deploy)" if args.deploy else ""}')
    print(f'params: {result["params"] / 1e6:.2f} M  (' + ', '.join(
        f'{name} {n / 1e6:.2f} M' for name, n in result['params_by_part'].items()) + ')')
    print(f'FLOPs (multiply-accumulates): {result["gmacs"]:.2f} G')
    for op, gmacs in result['gmacs_by_op'].items():
        print(f'  {op:<48} {gmacs:9.3f} G')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(result, f, indent=2)


if __name__ == '__main__':
    main()
