"""Inference latency of the deployable models: PyTorch eager beside ONNX Runtime (CPU, 1 and 2
threads), each project model beside its stock counterpart.

    python tools/analysis_tools/benchmark_inference.py [--models NAME ...] [--shape H W] [--repeats
        5] [--out-dir work_dirs/benchmark_inference]

Each model, random weights and deploy form, is exported in memory up to its raw head outputs; one
image runs ``--warmup`` times, then ``--repeats`` per engine (medians in ms). Writes
``results.json`` into ``--out-dir``.
"""
import argparse
import json
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import torch

from lab.proof.model_data import read_config
from mmvisattn.analysis import timing
from mmvisattn.deploy import export_onnx, onnxruntime_session, switch_to_deploy
from mmvisattn.deploy.onnx_export import RawOutputs
from mmvisattn.registry import build_from_config

# name -> (config, input size, the stock model it replaces or None)
MODELS: Dict[str, Tuple[str, Tuple[int, int], str]] = {
    'picodet-s-esnet': ('configs/picodet/picodet-s_esnet_8xb32-300e_coco-320.py', (320, 320), ''),
    'picodet-s-castling': (
        'configs/picodet/picodet-s_castling_8xb32-300e_coco-320.py', (320, 320), 'picodet-s-esnet',
    ),
    'picodet-l-esnet': ('configs/picodet/picodet-l_esnet_8xb32-300e_coco-640.py', (640, 640), ''),
    'picodet-l-castling': (
        'configs/picodet/picodet-l_castling_8xb32-300e_coco-640.py', (640, 640), 'picodet-l-esnet',
    ),
    'segformer-b0': (
        'mmseg::segformer/segformer_mit-b0_8xb1-160k_cityscapes-1024x1024.py', (512, 1024), '',
    ),
    'segformer-b0-rwgka': (
        'configs/segformer_rwgka/segformer_mit-b0-rwgka_8xb1-160k_cityscapes-1024x1024.py',
        (512, 1024), 'segformer-b0',
    ),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--models', nargs='+', default=list(MODELS), choices=list(MODELS))
    parser.add_argument('--shape', type=int, nargs=2, metavar=('H', 'W'),
                        help='one input size for every model')
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--out-dir', default='work_dirs/benchmark_inference')
    return parser.parse_args(argv)


def build_model(config: str):
    """The model of a project config or a stock one (``mmdet::`` / ``mmseg::``), random weights."""
    return build_from_config(read_config(config)).eval()


def measure(name: str, shape: Sequence[int], warmup: int, repeats: int) -> Dict[str, object]:
    config = MODELS[name][0]
    torch.manual_seed(0)
    model = build_model(config)
    switch_to_deploy(model)
    images = torch.randn(1, 3, *shape)
    onnx_bytes = export_onnx(model, images, opset=17)
    raw = RawOutputs(model).eval()
    result = {'model': name, 'config': config, 'input': list(shape)}
    with torch.no_grad():
        result['pytorch_ms'] = timing.median_ms(lambda: raw(images), repeats, warmup)
    feed = {'images': images.numpy()}
    for threads in (1, 2):
        session = onnxruntime_session(onnx_bytes, threads)
        result[f'onnxruntime_{threads}t_ms'] = timing.median_ms(
            lambda: session.run(None, feed), repeats, warmup)  # noqa: B023
    return result


def table(results: List[Dict[str, object]]) -> str:
    by_name = {r['model']: r for r in results}
    lines = ['| model | input | PyTorch (2 threads) | ONNX Runtime 1 thread | ONNX Runtime 2 '
             'threads | vs stock (ORT 2t) |', '|---|---|---|---|---|---|']
    for r in results:
        stock = by_name.get(MODELS[r['model']][2])
        ratio = f"{r['onnxruntime_2t_ms'] / stock['onnxruntime_2t_ms']:.2f}x" if stock else '-'
        lines.append(f"| {r['model']} | {r['input'][0]}x{r['input'][1]} | {r['pytorch_ms']:.1f} ms "
                     f"| {r['onnxruntime_1t_ms']:.1f} ms | {r['onnxruntime_2t_ms']:.1f} ms | "
                     f"{ratio} |")
    return '\n'.join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(2)
    results = [measure(name, args.shape or MODELS[name][1], args.warmup,
                       args.repeats) for name in args.models]
    print(table(results))
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / 'results.json').write_text(json.dumps(results, indent=2))
    print(f'wrote {out_dir / "results.json"}')


if __name__ == '__main__':
    main()
