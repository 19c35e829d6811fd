"""Every family's demo through mmdeploy's own tools on ONNX Runtime, and the deployed latency of our
models beside the stock ones (``make bench-deploy``).

    python tools/analysis_tools/benchmark_deploy.py --mmdeploy-dir MMDEPLOY_CHECKOUT [--cases
        NAME ...] [--latency PAIR ...] [--iters N] [--latency-runs 10] [--tools-dir tools]
        [--configs-dir configs] [--out-dir work_dirs/bench_deploy] [--record-dir
        docs/records/bench_deploy]

Per case of :data:`CASES`, where ``data/shapes`` is: the demo trains ``--iters`` through
``tools/train.py``; ``tools/test.py`` scores it; mmdeploy's ``tools/deploy.py`` exports it with
``configs/_deploy_/`` and its ``tools/test.py`` scores the ONNX Runtime model; both run on one image
for the largest difference (:func:`parity`). Per pair of :data:`LATENCY_PAIRS` both are exported at
one static size and timed alternately (median of ``--latency-runs``).

Writes ``results.json`` and the record (a failed case keeps its one-line error) into ``--out-dir``
(and ``--record-dir``, rendered by ``docs/user_guides/deployment.md``).
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, NamedTuple, Optional, Tuple

import numpy as np

from lab.bench.processes import run_or_raise
from mmvisattn.analysis import timing
from mmvisattn.analysis.demo_spread import NO_DETECTIONS, tested_runs


class Checkout(NamedTuple):
    """Where the tools run from: our ``tools/`` and ``configs/``, and mmdeploy's checkout."""
    tools: Path
    configs: Path
    mmdeploy: Path

    def deploy_config(self, name: str) -> Path:
        return (self.configs / '_deploy_' / name).resolve()


class DeployCase(NamedTuple):
    family: str
    config: str  # model config under configs/
    deploy: str  # deploy config under configs/_deploy_/
    # key of the metrics both test tools write; '' exports random weights (no demo data)
    metric: str
    override: str = ''  # appended to a config derived from ``config`` (the variant deployed)


# Mask2Former-Castling at 128x128 from random weights: there is no ADE20K demo data to train on
SMALL_MASK2FORMER = ("model = dict(data_preprocessor=dict(size=(128, 128)), "
                     "backbone=dict(img_size=(128, 128), init_cfg=None))\n")
RIPPLE_ENCODER = ("model = dict(encoder=dict(layer_cfg=dict(attn_cfg=dict(_delete_=True, "
                  "type='RippleAttention', attn_drop=0.0))))\n")
CASES: Dict[str, DeployCase] = {
    'smca': DeployCase('SMCA', 'smca/smca_r18_1xb8-600i_shapes-coco-128.py',
                       'detection_onnxruntime_dynamic.py', 'coco/bbox_mAP'),
    'smca-ripple': DeployCase('SMCA-Ripple', 'smca/smca_r18_1xb8-600i_shapes-coco-128.py',
                              'detection_onnxruntime_static.py', 'coco/bbox_mAP', RIPPLE_ENCODER),
    'vil-retinanet': DeployCase('ViL', 'vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py',
                                'detection_onnxruntime_static.py', 'coco/bbox_mAP'),
    'segformer-rwgka': DeployCase('Segformer-RWGKA',
                                  'segformer_rwgka/segformer_mit-b0-rwgka_1xb8-600i_shapes-cityscapes-128.py',
                                  'segmentation_onnxruntime_dynamic.py', 'mIoU'),
    'castling-segformer': DeployCase('Castling',
                                     'castling/segformer-head_castling-levit-s_1xb8-600i_shapes-cityscapes-128.py',
                                     'segmentation_onnxruntime_dynamic.py', 'mIoU'),
    'picodet-castling': DeployCase('PicoDet-Castling',
                                   'picodet/picodet-s_castling_1xb16-600i_shapes-coco-128.py',
                                   'detection_onnxruntime_dynamic.py', 'coco/bbox_mAP'),
    'mask2former-castling': DeployCase('Castling',
                                       'castling/mask2former_castling-vit-b_8xb2-160k_ade20k-512x512.py',
                                       'segmentation_mask2former_onnxruntime_dynamic.py', '',
                                       SMALL_MASK2FORMER),
    'pervit-mask-rcnn': DeployCase('PerViT',
                                   'pervit/mask-rcnn_pervit-t_simplefpn_1xb8-600i_shapes-coco-128.py',
                                   'instance-seg_onnxruntime_static.py', 'coco/bbox_mAP'),
    'vil-classifier': DeployCase('ViL', 'vil/vil-demo_1xb32-300i_shapes-imagenet-64.py',
                                 'classification_onnxruntime_static.py', 'accuracy/top1'),
    'castling-vit-classifier': DeployCase('Castling',
                                          'castling/castling-vit-demo_1xb32-300i_shapes-imagenet-64.py',
                                          'classification_onnxruntime_dynamic.py', 'accuracy/top1'),
    'pervit-classifier': DeployCase('PerViT', 'pervit/pervit-demo_1xb32-300i_shapes-imagenet-64.py',
                                    'classification_onnxruntime_static.py', 'accuracy/top1'),
    'deit-ripple-classifier': DeployCase('SMCA-Ripple',
                                         'smca/deit-ripple-demo_1xb32-300i_shapes-imagenet-64.py',
                                         'classification_onnxruntime_static.py', 'accuracy/top1'),
    'mit-rwgka-classifier': DeployCase('Segformer-RWGKA',
                                       'segformer_rwgka/mit-b0-rwgka-demo_1xb32-300i_shapes-imagenet-64.py',
                                       'classification_onnxruntime_dynamic.py', 'accuracy/top1'),
    'castling-levit-classifier': DeployCase('PicoDet-Castling',
                                            'picodet/castling-levit-s-demo_1xb32-300i_shapes-imagenet-64.py',
                                            'classification_onnxruntime_dynamic.py',
                                            'accuracy/top1'),
}


class LatencyPair(NamedTuple):
    ours: str
    stock: str  # a config of the project's folders or a package config (mmseg::...)
    deploy: str
    size: Tuple[int, int]
    # mmdeploy's; 13 where the stock model needs it (torch's MultiheadAttention: unflatten)
    opset: int = 11


LATENCY_PAIRS: Dict[str, LatencyPair] = {
    'PicoDet-S-Castling vs PicoDet-S-ESNet, 320x320': LatencyPair(
        'picodet/picodet-s_castling_8xb32-300e_coco-320.py',
        'picodet/picodet-s_esnet_8xb32-300e_coco-320.py',
        'detection_onnxruntime_static.py', (320, 320)),
    'SegFormer-B0-RWGKA vs SegFormer-B0, 1024x1024': LatencyPair(
        'segformer_rwgka/segformer_mit-b0-rwgka_8xb1-160k_cityscapes-1024x1024.py',
        'mmseg::segformer/segformer_mit-b0_8xb1-160k_cityscapes-1024x1024.py',
        'segmentation_onnxruntime_static.py', (1024, 1024), 13),
}


def metric_of(work_dir: Path, key: str) -> Optional[float]:
    """``key`` of the newest test run under ``work_dir`` that has it; ``None`` where the run had no
    detection to score (its mAP is 0)."""
    for metrics, log in tested_runs(work_dir):
        if key in metrics:
            return float(metrics[key])
        if key.startswith('coco/') and log.is_file() and NO_DETECTIONS in log.read_text():
            return None
    raise RuntimeError(f'no {key} in the metrics under {work_dir}')


def record_metric(row: Dict, side: str, value: Optional[float]) -> None:
    """``row[side]``: the metric, 0 for a run without detections (``row['no_detections']``)."""
    row[side] = 0.0 if value is None else value
    if value is None:
        row.setdefault('no_detections', []).append(side)


def model_config(case: DeployCase, folder: Path, configs: Path) -> Path:
    """The config deployed: the shipped one, or one derived from it by ``case.override``."""
    shipped = (configs / case.config).resolve()
    if not case.override:
        return shipped
    derived = folder / shipped.name
    derived.parent.mkdir(parents=True, exist_ok=True)
    derived.write_text(f'_base_ = [{str(shipped)!r}]\n{case.override}')
    return derived


def demo_image(config: Path) -> Path:
    """The first image of the config's test split."""
    from mmengine.config import Config
    from mmengine.registry import DATASETS, init_default_scope
    cfg = Config.fromfile(config)  # imports mmvisattn (custom_imports)
    init_default_scope(cfg.default_scope)
    dataset = DATASETS.build(cfg.test_dataloader.dataset)
    return Path(dataset.get_data_info(0)['img_path'])


def parity(deploy_cfg: str, config: str, checkpoint: str, onnx_file: str, image: str) -> float:
    """The largest difference between ONNX Runtime and the PyTorch model (through mmdeploy's
    rewriters) on ``image``, relative to max(1, the largest entry); detections compare sorted
    scores."""
    import onnxruntime
    import torch
    from mmdeploy.apis.utils import build_task_processor
    from mmdeploy.backend.onnxruntime.init_plugins import get_ops_path
    from mmdeploy.core import RewriterContext, patch_model
    from mmdeploy.utils import get_ir_config, load_config
    deploy_cfg, model_cfg = load_config(deploy_cfg, config)
    processor = build_task_processor(model_cfg, deploy_cfg, 'cpu')
    model = processor.build_pytorch_model(checkpoint)
    data, inputs = processor.create_input(image, None, data_preprocessor=model.data_preprocessor)
    with RewriterContext(cfg=deploy_cfg, backend='onnxruntime',
                         opset=get_ir_config(deploy_cfg).opset_version), \
            torch.no_grad():
        expected = patch_model(model, cfg=deploy_cfg,
                               backend='onnxruntime')(inputs, data['data_samples'])
    options = onnxruntime.SessionOptions()
    # mmdeploy's ops (Mask2Former's deformable attention)
    options.register_custom_ops_library(get_ops_path())
    session = onnxruntime.InferenceSession(onnx_file, options, providers=['CPUExecutionProvider'])
    outputs = session.run(None, {'input': inputs.numpy()})
    expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    return max(_difference(out, ref.numpy()) for out, ref in zip(outputs, expected))


def _difference(out: np.ndarray, ref: np.ndarray) -> float:
    if out.shape != ref.shape:
        raise RuntimeError(f'ONNX Runtime returned {out.shape}, the model {ref.shape}')
    if out.ndim == 3 and out.shape[-1] == 5:  # dets (batch, boxes, x1 y1 x2 y2 score)
        out, ref = np.sort(out[..., 4]), np.sort(ref[..., 4])
    elif not np.issubdtype(out.dtype, np.floating):  # labels: the share that differ
        return float((out != ref).mean())
    return float(np.abs(out - ref).max() / max(1.0, np.abs(ref).max()))


def deploy_case(name: str, case: DeployCase, checkout: Checkout, out_dir: Path, iters: int) -> Dict:
    """One case through both tool chains; its row of the record."""
    folder = out_dir / name
    config = model_config(case, folder, checkout.configs)
    deploy_cfg = checkout.deploy_config(case.deploy)
    row = dict(family=case.family, config=case.config, variant=case.override.strip(),
               deploy=case.deploy)
    if case.metric:
        checkpoint, image = trained_checkpoint(config, folder, iters,
                                               checkout.tools), demo_image(config)
        row.update(iters=iters, metric=case.metric)
        record_metric(row, 'pytorch', metric_of(folder / 'test', case.metric))
    else:
        checkpoint, image = folder / 'random.pth', random_image(folder / 'input.png', 128)
        random_checkpoint(deploy_cfg, config, checkpoint)
    started = time.perf_counter()
    run_or_raise([sys.executable, checkout.mmdeploy / 'tools/deploy.py', deploy_cfg, config,
                  checkpoint, image,
                  '--work-dir', folder / 'deploy', '--device', 'cpu'], folder / 'deploy.log')
    row.update(deploy_s=round(time.perf_counter() - started, 1))
    onnx_file = folder / 'deploy' / 'end2end.onnx'
    if case.metric:
        run_or_raise([sys.executable, checkout.mmdeploy / 'tools/test.py', deploy_cfg, config,
                      '--model', onnx_file,
                      '--device', 'cpu', '--work-dir', folder / 'mmdeploy_test'],
                     folder / 'mmdeploy_test.log')
        record_metric(row, 'onnxruntime', metric_of(folder / 'mmdeploy_test', case.metric))
    row.update(parity=parity(str(deploy_cfg), str(config), str(checkpoint), str(onnx_file),
                             str(image)))
    return row


def trained_checkpoint(config: Path, folder: Path, iters: int, tools: Path) -> str:
    """``config`` trained ``iters`` iterations and tested through our tools; the checkpoint."""
    run_or_raise([sys.executable, tools / 'train.py', config, '--work-dir', folder / 'train',
                  '--cfg-options',
                  f'train_cfg.max_iters={iters}', f'train_cfg.val_interval={iters}',
                  f'default_hooks.checkpoint.interval={iters}'],
                 folder / 'train.log')
    checkpoint = (folder / 'train' / 'last_checkpoint').read_text().strip()
    run_or_raise([sys.executable, tools / 'test.py', config, checkpoint, '--work-dir',
                  folder / 'test'],
                 folder / 'test.log')
    return checkpoint


def random_checkpoint(deploy_cfg, config, path: Path):
    """The model as mmdeploy builds it from ``config`` (a path or a ``Config``, as ``deploy_cfg``),
    random weights, saved to ``path``; the model."""
    import torch
    from mmdeploy.apis.utils import build_task_processor
    from mmdeploy.utils import load_config
    deploy_cfg, model_cfg = load_config(*(cfg if hasattr(cfg, 'filename') else str(cfg)
                                          for cfg in (deploy_cfg, config)))
    torch.manual_seed(0)
    model = build_task_processor(model_cfg, deploy_cfg, 'cpu').build_pytorch_model(None)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({'state_dict': model.state_dict()}, path)
    return model


def random_image(path: Path, height: int, width: Optional[int] = None) -> Path:
    import cv2
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(
        str(path),
        (np.random.default_rng(0).random((height, width or height, 3)) * 255).astype(np.uint8),
    )
    return path


def exported(config: str, deploy: Path, size: Tuple[int, int], opset: int, folder: Path,
             configs: Path) -> Path:
    """``config`` with random weights exported by mmdeploy at ``size``; the ONNX file."""
    from mmdeploy.apis import torch2onnx
    from mmengine.config import Config
    from mmengine.hub import get_config
    deploy_cfg = Config.fromfile(deploy)
    # input: width, height
    deploy_cfg.onnx_config.update(input_shape=[size[1], size[0]], opset_version=opset)
    model_cfg = get_config(config) if '::' in config else Config.fromfile(configs / config)
    model_cfg.model.get('backbone', {}).pop('init_cfg', None)
    checkpoint = folder / 'random.pth'
    random_checkpoint(deploy_cfg, model_cfg, checkpoint)
    image = random_image(folder / 'input.png', *size)
    torch2onnx(str(image), str(folder), 'end2end.onnx', deploy_cfg, model_cfg, str(checkpoint),
               device='cpu')
    return folder / 'end2end.onnx'


def latency_pair(name: str, pair: LatencyPair, checkout: Checkout, out_dir: Path,
                 runs: int) -> Dict:
    """Both models of ``pair`` in ONNX Runtime, timed alternately: median milliseconds."""
    import onnxruntime
    folder = out_dir / 'latency' / name.split(',')[0].replace(' ', '_')
    deploy = checkout.deploy_config(pair.deploy)
    sessions = {side: onnxruntime.InferenceSession(
        str(exported(config, deploy, pair.size, pair.opset, folder / side, checkout.configs)),
        providers=['CPUExecutionProvider'])
        for side, config in (('ours', pair.ours), ('stock', pair.stock))}
    feed = {
        'input': np.random.default_rng(0).standard_normal((1, 3, *pair.size)).astype(np.float32)
    }
    times = timing.rounds(
        {
            side: (lambda s: lambda: s.run(None, feed))(session)
            for side, session in sessions.items()
        },
        runs,
    )
    medians = {
        f'{side}_ms': round(1e3 * statistics.median(seconds), 1) for side, seconds in times.items()
    }
    return dict(ours=pair.ours, stock=pair.stock, size=list(pair.size), opset=pair.opset, runs=runs,
                **medians)


def case_table(cases: Dict[str, Dict]) -> str:
    """The cases' table (markdown)."""
    lines = ['| family | demo (deploy config) | exported, ONNX Runtime vs PyTorch | metric: '
             'project `tools/test.py` | '
             "mmdeploy's `tools/test.py` |", '|---|---|---|---|---|']
    for name, row in cases.items():
        demo = (f'`{Path(row["config"]).stem}`{" + " + name if row.get("variant") else ""} '
                f'(`{row["deploy"]}`)')
        if 'error' in row:
            lines.append(f'| {row["family"]} | {demo} | not exported: {row["error"]} | - | - |')
        elif 'metric' not in row:
            lines.append(f'| {row["family"]} | {demo} | yes, {row["parity"]:.1e} | random weights, '
                         'no demo data | - |')
        else:
            lines.append(f'| {row["family"]} | {demo} | yes, {row["parity"]:.1e} | {row["metric"]} '
                         f'{metric_cell(row, "pytorch")} ({row["iters"]} iterations) | '
                         f'{metric_cell(row, "onnxruntime")} |')
    return '\n'.join(lines) + '\n'


def metric_cell(row: Dict, side: str) -> str:
    return f'{row[side]:.3f}{" (no detections)" if side in row.get("no_detections", ()) else ""}'


def latency_table(latency: Dict[str, Dict]) -> str:
    """The latency pairs' table (markdown)."""
    lines = ['| ONNX Runtime, batch 1 | project model | stock model | ratio |', '|---|---|---|---|']
    for name, row in latency.items():
        lines.append(f'| {name} | {row["ours_ms"]:.1f} ms | {row["stock_ms"]:.1f} ms | '
                     f'{row["ours_ms"] / row["stock_ms"]:.2f} |')
    return '\n'.join(lines) + '\n'


def tables(results: Dict) -> str:
    """A run's tables (markdown)."""
    return case_table(results['cases']) + '\n' + latency_table(results['latency'])


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--mmdeploy-dir', type=Path, required=True,
                        help="a checkout of mmdeploy 1.3.1 (its tools/deploy.py and tools/test.py)")
    parser.add_argument('--tools-dir', type=Path, default=Path('tools'),
                        help="the project's tools (train.py, test.py)")
    parser.add_argument('--configs-dir', type=Path, default=Path('configs'),
                        help="the project's configs")
    parser.add_argument('--cases', nargs='*', choices=sorted(CASES), default=sorted(CASES))
    parser.add_argument('--latency', nargs='*', choices=sorted(LATENCY_PAIRS),
                        default=sorted(LATENCY_PAIRS))
    parser.add_argument('--iters', type=int, default=100, help='training iterations of each demo')
    parser.add_argument('--latency-runs', type=int, default=10)
    parser.add_argument('--out-dir', type=Path, default=Path('work_dirs/bench_deploy'))
    parser.add_argument('--record-dir', type=Path)
    args = parser.parse_args(argv)
    if not (args.mmdeploy_dir / 'tools' / 'deploy.py').is_file():
        parser.error(f'--mmdeploy-dir {args.mmdeploy_dir}: no tools/deploy.py there; expected a '
                     'checkout of mmdeploy')
    if not (args.tools_dir / 'train.py').is_file() or not (args.configs_dir / '_deploy_').is_dir():
        parser.error(f'--tools-dir {args.tools_dir} / --configs-dir {args.configs_dir}: expected '
                     'the project\'s tools/ and configs/ (run from a checkout, or name them)')
    if args.iters < 1 or args.latency_runs < 1:
        parser.error('--iters and --latency-runs must be positive')
    return args


def main(argv=None) -> None:
    from mmvisattn.analysis.records import cpu_record, write_cpu_record
    args = parse_args(argv)
    checkout = Checkout(args.tools_dir.resolve(), args.configs_dir.resolve(),
                        args.mmdeploy_dir.resolve())
    args.out_dir.mkdir(parents=True, exist_ok=True)
    results: Dict = dict(cases={}, latency={})
    for name in args.cases:
        try:
            results['cases'][name] = deploy_case(name, CASES[name], checkout, args.out_dir,
                                                 args.iters)
        except RuntimeError as error:
            results['cases'][name] = dict(CASES[name]._asdict(),
                                          variant=CASES[name].override.strip(), error=str(error))
        print(f'{name}: {results["cases"][name]}', flush=True)
        (args.out_dir / 'results.json').write_text(json.dumps(results, indent=1))
    for name in args.latency:
        results['latency'][name] = latency_pair(name, LATENCY_PAIRS[name], checkout, args.out_dir,
                                                args.latency_runs)
        print(f'{name}: {results["latency"][name]}', flush=True)
        (args.out_dir / 'results.json').write_text(json.dumps(results, indent=1))
    print(tables(results))
    record = cpu_record('bench_deploy', results)
    print('wrote the record '
          f'{", ".join(map(str, write_cpu_record(record, args.out_dir, args.record_dir)))}')
