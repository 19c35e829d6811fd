"""Evaluate a checkpoint on a config's test set, as the stock ``tools/test.py`` of mmdet, mmseg and
mmpretrain do (scope from ``default_scope``).

    python -m mmvisattn.launch.test CONFIG CHECKPOINT [--work-dir DIR] [--out OUT] [--out-item
                                    pred|metrics] [--show] [--show-dir DIR] [--wait-time S]
                                    [--interval N] [--tta] [--amp] [--no-pin-memory]
                                    [--allow-partial-checkpoint] [--cfg-options k=v ...]
                                    [--cfg-new-keys]

A checkpoint that does not set every weight of the model is refused in one line."""
import argparse

import mmengine

from mmvisattn.launch import add_config_arguments, load_config, parse_tool_args, run
from mmvisattn.launch.options import (
    dump_predictions,
    loader_options,
    metrics_file,
    show_predictions,
    test_time_augmentation,
)

TEST_LOADERS = ('test_dataloader',)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Test a model of mmvisattn (or any '
                                     'mmdet/mmseg/mmpretrain config)')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='the dir to save the evaluation metrics')
    parser.add_argument('--out',
                        help='mmdet and mmpretrain configs: a .pkl file for the raw predictions; '
                        'mmseg configs: a folder for the predicted label maps')
    parser.add_argument('--show', action='store_true',
                        help='show each image with its predictions in a window')
    parser.add_argument(
        '--show-dir', help='save images with predictions drawn into this dir (under the work dir)'
    )
    parser.add_argument('--out-item', choices=['pred', 'metrics'],
                        help="what --out holds: the predictions (default) or the metrics "
                        "(mmpretrain's flag)")
    parser.add_argument('--wait-time', type=float, default=2,
                        help='seconds each shown image stays (--show)')
    parser.add_argument('--interval', type=int, default=1,
                        help='draw every n-th test image (--show, --show-dir)')
    parser.add_argument('--amp', action='store_true',
                        help='test under automatic mixed precision (test_cfg.fp16)')
    parser.add_argument('--no-pin-memory', action='store_true',
                        help='no pinned memory in the dataloader')
    parser.add_argument('--tta', action='store_true',
                        help="test-time augmentation: the config's tta_model and "
                        "tta_pipeline (mmdet configs without them: mmdet's flip default)")
    parser.add_argument('--allow-partial-checkpoint', action='store_true',
                        help='evaluate even when the checkpoint leaves some weights of the model '
                        'unset or holds others (the stock behaviour, with a warning)')
    add_config_arguments(parser)
    return parse_tool_args(parser)


def main() -> None:
    args = parse_args()
    cfg = load_config(args.config, args.cfg_options, args.work_dir, args.launcher,
                      args.cfg_new_keys)
    cfg.load_from = args.checkpoint
    if args.out_item and not args.out:
        raise SystemExit('error: --out-item says what --out holds; give --out FILE too')
    if args.show or args.show_dir:
        show_predictions(cfg, args.show_dir, args.show, args.wait_time, args.interval)
    if args.tta:
        test_time_augmentation(cfg, drawn=bool(args.show or args.show_dir))
    if args.amp:
        cfg.test_cfg.fp16 = True
    loader_options(cfg, TEST_LOADERS, pin_memory=not args.no_pin_memory)
    metrics_out = metrics_file(args.out) if args.out_item == 'metrics' else None
    if args.out and not metrics_out:
        dump_predictions(cfg, args.out)
    metrics = run(cfg, 'test', TEST_LOADERS, allow_partial_checkpoint=args.allow_partial_checkpoint)
    if metrics_out:
        mmengine.dump(metrics, metrics_out)


if __name__ == '__main__':
    main()
