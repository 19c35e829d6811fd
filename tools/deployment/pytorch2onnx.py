"""Export a detector or segmentor of the project to ONNX and check it with ONNX Runtime.

    python tools/deployment/pytorch2onnx.py CONFIG CHECKPOINT --out model.onnx [--shape H W]
        [--dynamic] [--opset 17] [--tolerance 1e-4] [--overwrite]

The model is built from CONFIG, loaded from CHECKPOINT (every weight must fit), switched to deploy
(Castling's auxiliary softmax branches removed) and exported up to its raw head outputs
(``model._forward``: per-level scores and boxes, or segmentation logits). ONNX Runtime (CPU) then
runs the file on the same random image; the tool prints the largest output difference (relative
to each output's largest entry) and fails when it exceeds ``--tolerance``. For a Castling model it
also checks that no ``MatMul`` of the graph produces a ``tokens x tokens`` matrix. The file is
written only when every check passes. Needs the deploy extra: ``pip install -e .[deploy]``.
"""
import argparse
import importlib.util
import os.path as osp
import sys
from typing import Tuple

import torch
from mmengine.config import Config

from mmvisattn.deploy import (
    ExportError,
    attention_sizes,
    check_shape,
    export_onnx,
    parity_error,
    quadratic_matmuls,
    run_onnxruntime,
    switch_to_deploy,
)
from mmvisattn.deploy.onnx_export import RawOutputs
from mmvisattn.launch import load_config
from mmvisattn.launch.checks import check_model_fits_checkpoint, model_weights, read_run_checkpoint
from mmvisattn.registry import build_from_config

STRIDE = 32  # the deepest stride of every exported backbone


def default_shape(cfg: Config) -> Tuple[int, int]:
    """The config's test size: a segmentor's crop, a detector's fixed test resize, or the long
    side of a keep-ratio resize padded to the stride (800 x 1344 for COCO's 1333 x 800)."""
    size = cfg.model.get('data_preprocessor', {}).get('size')
    if size:
        return tuple(size)
    resize = next((step for step in cfg.get('test_pipeline', []) if step['type'] == 'Resize'), None)
    if resize is None:
        raise SystemExit('error: the config has no test Resize to take the input size from; give '
                         '--shape H W')
    width, height = resize['scale']
    if resize.get('keep_ratio', False):
        height, width = min(width, height), max(width, height)
    return tuple(-(-side // STRIDE) * STRIDE for side in (height, width))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config')
    parser.add_argument('checkpoint')
    parser.add_argument('--out', required=True, help='the .onnx file to write')
    parser.add_argument('--shape', type=int, nargs=2, metavar=('H', 'W'),
                        help='input size (default: the config\'s)')
    parser.add_argument('--dynamic', action='store_true',
                        help='dynamic batch, height and width axes')
    parser.add_argument('--opset', type=int, default=17)
    parser.add_argument('--tolerance', type=float, default=1e-4,
                        help='largest relative output difference')
    parser.add_argument('--overwrite', action='store_true', help='replace an existing --out')
    return parser.parse_args(argv)


def check_arguments(args: argparse.Namespace) -> None:
    missing = [name for name in ('onnx', 'onnxruntime') if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit(f'error: {" and ".join(missing)} not installed; install the deploy extra: '
                         'pip install -e .[deploy]')
    for path, what in ((args.config, 'config'), (args.checkpoint, 'checkpoint')):
        if not osp.isfile(path):
            raise SystemExit(f'error: {what} file {path!r} does not exist')
    if osp.exists(args.out) and not args.overwrite:
        raise SystemExit(f'error: {args.out!r} exists; pass --overwrite to replace it')


def load_model(args: argparse.Namespace) -> Tuple[torch.nn.Module, Config]:
    cfg = load_config(args.config)
    model = build_from_config(cfg).eval()
    checkpoint = read_run_checkpoint(args.checkpoint)
    check_model_fits_checkpoint(model, checkpoint, args.checkpoint,
                                'is it a checkpoint of this config?')
    model.load_state_dict(model_weights(checkpoint, args.checkpoint))
    return model, cfg


def main(argv=None) -> None:
    args = parse_args(argv)
    check_arguments(args)
    model, cfg = load_model(args)
    deployed = switch_to_deploy(model)
    try:
        shape = check_shape(args.shape or default_shape(cfg), STRIDE)
        images = torch.randn(1, 3, *shape, generator=torch.Generator().manual_seed(0))
        onnx_bytes = export_onnx(model, images, args.opset, args.dynamic)
    except ExportError as exc:
        raise SystemExit(f'error: {args.config}: {exc}') from None
    with torch.no_grad():
        reference = list(RawOutputs(model)(images))
    error = parity_error(reference, run_onnxruntime(onnx_bytes, images))
    print(f'{len(reference)} outputs at {shape[0]}x{shape[1]}; ONNX Runtime vs PyTorch: max '
          f'relative difference {error:.2e} (tolerance {args.tolerance:g})')
    if error > args.tolerance:
        raise SystemExit(f'error: ONNX Runtime differs from PyTorch by {error:.2e} > --tolerance '
                         f'{args.tolerance:g}; {args.out} not written')
    if deployed:
        sizes = attention_sizes(model, images)
        # the check needs shapes
        static = export_onnx(model, images, args.opset) if args.dynamic else onnx_bytes
        quadratic = quadratic_matmuls(static, sizes)
        if quadratic:
            raise SystemExit(f'error: the deploy graph holds {len(quadratic)} tokens x tokens '
                             f'MatMuls (e.g. {quadratic[0]}); {args.out} not written')
        print(f'{deployed} auxiliary branches removed; no MatMul of the graph is tokens x tokens '
              f'(tokens {sorted({tokens for tokens, _ in sizes})})')
    with open(args.out, 'wb') as file:
        file.write(onnx_bytes)
    print(f'saved {args.out} ({len(onnx_bytes) / 1e6:.2f} MB, opset {args.opset})')


if __name__ == '__main__':
    sys.exit(main())
