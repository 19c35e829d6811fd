"""Evaluate a checkpoint on a config's test set (COCO mAP for mmdet configs, mIoU for mmseg ones),
as the stock ``tools/test.py`` of mmdet and mmseg do; the scope comes from ``default_scope``.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--show-dir DIR] [--allow-partial-checkpoint]
                         [--cfg-options k=v ...]

Unlike the stock tools, a checkpoint that does not set every weight of the model (one of another
model, or of another width) is refused in one line instead of scoring a partly random model.
"""
import argparse
import os.path as osp

from mmengine.config import DictAction

import mmvisattn  # noqa: F401  (registers the models, applies the torch 2.13 compatibility shims)
from mmvisattn.launch import load_config, parse_tool_args, run

TEST_LOADERS = ('test_dataloader',)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Test a model of mmvisattn (or any mmdet/mmseg config)')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='the dir to save the evaluation metrics')
    parser.add_argument('--show-dir', help='save images with predictions drawn into this dir (under the work dir)')
    parser.add_argument('--allow-partial-checkpoint', action='store_true',
                        help='evaluate even when the checkpoint leaves some weights of the model unset or holds '
                             'others (the stock behaviour, with a warning)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, e.g. test_evaluator.classwise=True')
    return parse_tool_args(parser)


def enable_visualization(cfg, show_dir: str) -> None:
    """Turn on the visualisation hook of either scope so predictions are drawn into ``show_dir``."""
    hook = cfg.default_hooks.get('visualization')
    if hook is None:
        raise SystemExit('error: --show-dir needs default_hooks.visualization in the config')
    hook['draw'] = True
    hook['interval'] = 1
    if cfg.default_scope == 'mmdet':
        hook['test_out_dir'] = show_dir
    else:
        cfg.visualizer['save_dir'] = osp.join(cfg.work_dir, show_dir)


def main() -> None:
    args = parse_args()
    cfg = load_config(args.config, args.cfg_options, args.work_dir, args.launcher)
    cfg.load_from = args.checkpoint
    if args.show_dir:
        enable_visualization(cfg, args.show_dir)
    run(cfg, 'test', TEST_LOADERS, allow_partial_checkpoint=args.allow_partial_checkpoint)


if __name__ == '__main__':
    main()
