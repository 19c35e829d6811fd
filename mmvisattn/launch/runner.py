"""Start-up shared by ``tools/train.py`` and ``tools/test.py``: config loading, scope, checks and
the process group. The tools add nothing to the config: the safeguard hooks come from
``configs/_base_/safeguard_hooks.py``, so stock ``tools/train.py`` and ``mim train`` run them too.
"""
import argparse
import os
import os.path as osp
from typing import Any, Optional, Sequence

from mmengine.config import Config, DictAction

from ..compat import apply_tool_patches, patches_line
from ..engine.hooks import NonFiniteLoss
from ..utils.checkpoint import CheckpointError
from .checks import (
    check_data_files,
    check_model_fits_checkpoint,
    diagnose_failure,
    read_run_checkpoint,
)
from .config_checks import check_config
from .process_group import LAUNCHERS, join_process_group, leave_process_group

SCOPES = ('mmdet', 'mmseg', 'mmpretrain')


def parse_tool_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Add the arguments the launch scripts pass (``--launcher``, and ``--local-rank`` from older
    torch launchers), parse, and export ``LOCAL_RANK`` as torch's launcher does."""
    parser.add_argument('--launcher', choices=LAUNCHERS, default='none')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """``--cfg-options`` as the stock tools take it, and ``--cfg-new-keys`` to let it add keys."""
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, e.g. train_cfg.max_iters=10; a key the '
                        'config does not have is refused with the nearest existing ones')
    parser.add_argument('--cfg-new-keys', action='store_true',
                        help='let --cfg-options add keys the config does not have')


def load_config(path: str, cfg_options: Optional[dict] = None, work_dir: Optional[str] = None,
                launcher: str = 'none', new_keys: bool = False) -> Config:
    """Load ``path``, apply ``--cfg-options`` and pick ``work_dir`` as the stock tools do, after the
    tools' patches; a bad file, scope or config exits in one line before anything is written."""
    apply_tool_patches()
    if not osp.isfile(path):
        raise SystemExit(f'error: config file {path!r} does not exist')
    try:
        cfg = Config.fromfile(path)
    except Exception as exc:  # a syntax error, a missing base file: mmengine's message, in one line
        raise SystemExit(f'error: config file {path!r} cannot be read: '
                         f'{str(exc).strip().splitlines()[-1]}') from None
    scope = cfg.get('default_scope')
    if scope not in SCOPES:
        raise SystemExit(f'error: config {path!r} has default_scope={scope!r}; expected one of '
                         f'{SCOPES}')
    check_config(cfg, cfg_options, new_keys)
    cfg.launcher = launcher
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(path))[0])
    return cfg


def checkpoint_to_load(cfg: Config) -> Optional[str]:
    """The checkpoint the Runner will load: ``load_from``, or on ``resume`` without a path the one
    the work dir's ``last_checkpoint`` names (None when there is none: training starts afresh)."""
    from mmengine.runner import find_latest_checkpoint
    if cfg.get('resume') and not cfg.get('load_from'):
        return find_latest_checkpoint(cfg.work_dir) if osp.isdir(cfg.work_dir) else None
    return cfg.get('load_from')


def adopt_checkpoint_seed(cfg: Config, checkpoint: dict) -> None:
    """Resume with the interrupted run's seed: mmengine restores it only after the dataloaders are
    built, so with ``randomness.seed=None`` a resumed run's sampler and augmentations would follow a
    new seed."""
    seed = checkpoint.get('meta', {}).get('seed')
    randomness = dict(cfg.get('randomness') or {})
    if seed is not None and randomness.get('seed') is None:
        cfg.randomness = dict(randomness, seed=seed)


def collect_in_log_dir(runner, loop_name: str) -> None:
    """Let ``runner.<loop_name>``'s metrics gather the ranks' results in the run's log folder:
    without ``collect_dir`` they write ``.dist_test/`` under the current directory and leave it
    behind. Stock metrics do not take it as a config argument, so it is set on the built ones."""
    loop = getattr(runner, loop_name)
    for metric in getattr(getattr(loop, 'evaluator', None), 'metrics', ()):
        if getattr(metric, 'collect_dir', None) is None:
            metric.collect_dir = osp.join(runner.log_dir, 'collect')


def run(cfg: Config, action: str, dataloaders: Sequence[str],
        allow_partial_checkpoint: bool = False) -> Any:
    """Check the data and the checkpoint, join the process group, build the Runner and call
    ``runner.<action>()``; returns what it returns (the model trained, the test metrics). Bad input,
    a non-finite loss and data faults found while the run goes (a corrupted annotation file, an
    empty dataset, an undecodable image) exit in one line.

    A distributed run that finished leaves its process group in order.

    ``tools/test.py`` evaluates only a checkpoint that sets every weight of the model, unless
    ``allow_partial_checkpoint``."""
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner

    check_data_files(cfg, dataloaders)
    path = checkpoint_to_load(cfg)
    checkpoint = read_run_checkpoint(path) if path else None
    if checkpoint is not None and action == 'train' and cfg.get('resume'):
        adopt_checkpoint_seed(cfg, checkpoint)
    join_process_group(cfg)
    runner = Runner.from_cfg(cfg) if 'runner_type' not in cfg else RUNNERS.build(cfg)
    runner.logger.info(patches_line())
    if cfg.launcher != 'none':
        collect_in_log_dir(runner, 'test_loop' if action == 'test' else 'val_loop')
    if checkpoint is not None and action == 'test' and not allow_partial_checkpoint:
        check_model_fits_checkpoint(runner.model, checkpoint, path)
    del checkpoint  # the Runner reads the file itself
    try:
        result = getattr(runner, action)()
    # a non-finite loss; pretrained weights that do not load
    except (NonFiniteLoss, CheckpointError) as exc:
        raise SystemExit(f'error: {exc}') from None
    except Exception as exc:
        message = diagnose_failure(cfg, dataloaders, exc)
        if message:
            raise SystemExit(message) from None
        raise
    leave_process_group()
    return result
