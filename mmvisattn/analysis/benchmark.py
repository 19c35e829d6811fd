"""Inference speed of any detection, segmentation or classification config: mmdet's
``InferenceBenchmark`` on this machine's device, CPU or CUDA (the stock tools require CUDA).

    python tools/analysis_tools/benchmark.py CONFIG [CHECKPOINT] [--max-iter 2000] [--num-warmup 5]
        [--log-interval 50] [--repeat-num 1] [--fuse-conv-bn] [--device cpu|cuda] [--work-dir DIR]

The test dataloader (batch 1, no workers) feeds ``model.test_step``; images per second after
``--num-warmup`` are logged every ``--log-interval`` and at the end. Without a checkpoint the
weights are random. ``--work-dir`` also receives ``benchmark.json``."""
import argparse
import json
import time
from pathlib import Path
from typing import Dict, List, Optional

import torch
from mmengine.config import Config
from mmengine.logging import print_log

from mmvisattn.launch import add_config_arguments, check_data_files, load_config
from mmvisattn.launch.checks import check_model_fits_checkpoint, model_weights, read_run_checkpoint
from mmvisattn.registry import build_from_config


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', nargs='?', help='checkpoint file (default: random weights)')
    parser.add_argument('--checkpoint', dest='checkpoint_option',
                        help="mmdet's spelling of the checkpoint")
    parser.add_argument('--max-iter', type=int, default=2000, help='images timed after the warm-up')
    parser.add_argument('--num-warmup', type=int, default=5, help='images run before the timing')
    parser.add_argument('--log-interval', type=int, default=50,
                        help='log the speed every this many images')
    parser.add_argument('--repeat-num', type=int, default=1,
                        help='repeat the measurement and average')
    parser.add_argument('--fuse-conv-bn', action='store_true',
                        help='fold batch norms into the convolutions first')
    parser.add_argument('--device', choices=('cpu', 'cuda'),
                        help='default: cuda where there is one')
    parser.add_argument('--work-dir', help='write benchmark.json into this folder')
    add_config_arguments(parser)
    args = parser.parse_args(argv)
    for name in ('max_iter', 'log_interval', 'repeat_num'):
        if getattr(args, name) < 1:
            parser.error(f'--{name.replace("_", "-")} must be positive, got {getattr(args, name)}')
    args.checkpoint = args.checkpoint or args.checkpoint_option
    return args


def build_model(cfg: Config, checkpoint: Optional[str], fuse: bool, device: str) -> torch.nn.Module:
    model = build_from_config(cfg)
    if checkpoint:
        weights = read_run_checkpoint(checkpoint)
        check_model_fits_checkpoint(model, weights, checkpoint,
                                    remedy='expected a checkpoint of this config')
        model.load_state_dict(model_weights(weights, checkpoint))
    if fuse:
        from mmcv.cnn import fuse_conv_bn
        model = fuse_conv_bn(model)
    return model.to(device).eval()


def synchronize(device: str) -> None:
    if device == 'cuda':
        torch.cuda.synchronize()


def images_per_second(model: torch.nn.Module, loader, device: str,
                      args: argparse.Namespace) -> float:
    """One measurement: ``--num-warmup`` images, then ``--max-iter`` timed ones (or fewer)."""
    elapsed, timed = 0.0, 0
    for index, data in enumerate(loader):
        synchronize(device)
        start = time.perf_counter()
        with torch.no_grad():
            model.test_step(data)
        synchronize(device)
        if index < args.num_warmup:
            continue
        elapsed, timed = elapsed + time.perf_counter() - start, timed + 1
        if timed % args.log_interval == 0:
            print_log(f'Done image [{timed:<3}/{args.max_iter}], fps: {timed / elapsed:.2f} img/s, '
                      f'times per image: {1000 * elapsed / timed:.1f} ms/img', logger='current')
        if timed == args.max_iter:
            break
    if not timed:
        raise SystemExit(f'error: the test dataset has no image after the {args.num_warmup} '
                         'warm-up images')
    return timed / elapsed


def measure(args: argparse.Namespace) -> Dict:
    cfg = load_config(args.config, args.cfg_options, new_keys=args.cfg_new_keys)
    check_data_files(cfg, ['test_dataloader'])
    device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    if device == 'cuda' and not torch.cuda.is_available():
        raise SystemExit('error: --device cuda, but torch sees no CUDA device here')
    # sets the config's default scope
    model = build_model(cfg, args.checkpoint, args.fuse_conv_bn, device)
    from mmengine.runner import Runner
    loader = Runner.build_dataloader(dict(cfg.test_dataloader, batch_size=1, num_workers=0,
                                          persistent_workers=False))
    runs: List[float] = [images_per_second(model, loader, device,
                                           args) for _ in range(args.repeat_num)]
    fps = sum(runs) / len(runs)
    print_log(f'Overall fps: {fps:.2f} img / s, times per image: {1000 / fps:.1f} ms / img '
              f'({device})', logger='current')
    return dict(config=args.config, checkpoint=args.checkpoint, device=device, fps=fps,
                fps_list=runs, ms_per_image=1000 / fps)


def main(argv=None) -> None:
    args = parse_args(argv)
    result = measure(args)
    if args.work_dir:
        Path(args.work_dir).mkdir(parents=True, exist_ok=True)
        (Path(args.work_dir) / 'benchmark.json').write_text(json.dumps(result, indent=2) + '\n')


if __name__ == '__main__':
    main()
