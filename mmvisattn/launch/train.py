"""Train a detector, segmentor or image classifier from a config, as the stock ``tools/train.py`` of
mmdet, mmseg and mmpretrain do (scope from ``default_scope``).

    python -m mmvisattn.launch.train CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp]
                                     [--auto-scale-lr] [--requeue] [--no-validate] [--no-pin-memory]
                                     [--no-persistent-workers] [--cfg-options k=v ...]
                                     [--cfg-new-keys] [--launcher none|pytorch|slurm]
"""
import argparse

import torch

from mmvisattn.launch import add_config_arguments, load_config, parse_tool_args, run
from mmvisattn.launch.options import (
    enable_auto_scale_lr,
    enable_requeue,
    loader_options,
    resume_of_requeued_job,
    skip_validation,
)

TRAIN_LOADERS = ('train_dataloader', 'val_dataloader')


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Train a model of mmvisattn (or any '
                                     'mmdet/mmseg/mmpretrain config)')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument('--amp', action='store_true',
                        help='mixed precision: float16 with dynamic loss scaling on CUDA (mmengine '
                        'AmpOptimWrapper), bfloat16 autocast on CPU (CPUAmpOptimWrapper)')
    parser.add_argument('--resume', nargs='?', type=str, const='auto',
                        help='resume from this checkpoint, or from the latest one in the work dir '
                             'when no path is given')
    parser.add_argument('--requeue', action='store_true',
                        help='on a stop signal (Slurm preemption or time limit: PreemptionHook), '
                        'requeue this sbatch '
                             'job after the checkpoint; the requeued job resumes by itself')
    parser.add_argument('--auto-scale-lr', action='store_true',
                        help="scale the learning rate by the total batch over the config's "
                             'auto_scale_lr.base_batch_size (as mmdet does)')
    parser.add_argument('--no-validate', action='store_true',
                        help='train without validating (as mmpretrain does)')
    parser.add_argument('--no-pin-memory', action='store_true',
                        help='no pinned memory in the dataloaders')
    parser.add_argument('--no-persistent-workers', action='store_true',
                        help='dataloader workers restarted every epoch')
    add_config_arguments(parser)
    return parse_tool_args(parser)


def enable_amp(cfg) -> None:
    """Switch the config's optimizer wrapper to mixed precision for this run's device."""
    if torch.cuda.is_available():
        cfg.optim_wrapper.update(type='AmpOptimWrapper', loss_scale='dynamic')
    else:
        cfg.optim_wrapper.update(type='CPUAmpOptimWrapper', dtype='bfloat16')


def main() -> None:
    args = parse_args()
    cfg = load_config(args.config, args.cfg_options, args.work_dir, args.launcher,
                      args.cfg_new_keys)
    if args.amp:
        enable_amp(cfg)
    if args.auto_scale_lr:
        enable_auto_scale_lr(cfg)
    if args.requeue:
        enable_requeue(cfg)
    if args.no_validate:
        skip_validation(cfg)
    loader_options(cfg, TRAIN_LOADERS, not args.no_pin_memory, not args.no_persistent_workers)
    args.resume = resume_of_requeued_job(args.resume)
    if args.resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif args.resume is not None:
        cfg.resume, cfg.load_from = True, args.resume
    run(cfg, 'train', TRAIN_LOADERS)


if __name__ == '__main__':
    main()
