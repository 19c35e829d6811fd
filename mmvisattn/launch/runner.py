"""Start-up shared by ``tools/train.py`` and ``tools/test.py``: config loading, scope, the checks of
:mod:`.checks`, and distributed initialisation that also works on CPU-only machines. The tools add
nothing to the config: the safeguard hooks come from ``configs/_base_/safeguard_hooks.py``, which
every project config reaches, so stock ``tools/train.py`` and ``mim train`` run them too.

Stock mmengine 0.10.7 cannot launch on a CPU build of torch: its pytorch launcher calls
``torch.cuda.set_device`` unconditionally and its Runner wraps the model in DDP with
``device_ids=[LOCAL_RANK]``, which DDP rejects for CPU modules. Initialising a gloo process group
before the Runner exists makes mmengine skip its own initialisation, and ``device_ids=None`` lets
DDP wrap a CPU module.
"""
import argparse
import os
import os.path as osp
from contextlib import contextmanager
from typing import Iterator, Mapping, Optional, Sequence

import torch
import torch.distributed as dist
from mmengine.config import Config, DictAction

from ..engine.hooks import NonFiniteLoss
from ..utils.checkpoint import CheckpointError
from .config_checks import check_config
from .checks import check_data_files, check_model_fits_checkpoint, diagnose_failure, read_run_checkpoint

SCOPES = ('mmdet', 'mmseg')
LAUNCHERS = ('none', 'pytorch', 'slurm')


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
                        help='override config settings, e.g. train_cfg.max_iters=10; a key the config does not '
                             'have is refused with the nearest existing ones')
    parser.add_argument('--cfg-new-keys', action='store_true',
                        help='let --cfg-options add keys the config does not have')


def load_config(path: str, cfg_options: Optional[dict] = None, work_dir: Optional[str] = None,
                launcher: str = 'none', new_keys: bool = False) -> Config:
    """Load ``path``, apply ``--cfg-options`` and pick ``work_dir`` as the stock tools do; a missing
    or unreadable file, an unknown scope and the mistakes of :func:`.config_checks.check_config`
    exit in one line before anything is built or written."""
    if not osp.isfile(path):
        raise SystemExit(f'error: config file {path!r} does not exist')
    try:
        cfg = Config.fromfile(path)
    except Exception as exc:  # a syntax error, a missing base file: mmengine's message, in one line
        raise SystemExit(f'error: config file {path!r} cannot be read: {str(exc).strip().splitlines()[-1]}') from None
    scope = cfg.get('default_scope')
    if scope not in SCOPES:
        raise SystemExit(f'error: config {path!r} has default_scope={scope!r}; expected one of {SCOPES}')
    check_config(cfg, cfg_options, new_keys)
    cfg.launcher = launcher
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(path))[0])
    return cfg


# Slurm jobs' rendezvous ports: below Linux's ephemeral range (32768-60999), from which the kernel
# takes the ports of outgoing connections; a few consecutive ones per job, one for each restart
JOB_PORTS = range(10000, 32768)
RESTARTS_PER_JOB = 16


def slurm_master_port(env: Mapping[str, str]) -> str:
    """The rendezvous port of a Slurm job: ``MASTER_PORT`` where the user set one, else one derived
    from ``SLURM_JOB_ID`` and ``SLURM_RESTART_COUNT`` (a requeued job keeps its id, and its earlier
    port may still be held). Every task of a job computes the same port without talking to the
    others, and jobs sharing a node no longer all take torch's 29500 (the second one's
    ``EADDRINUSE``)."""
    if env.get('MASTER_PORT'):
        return env['MASTER_PORT']
    job, restart = env.get('SLURM_JOB_ID', '0'), env.get('SLURM_RESTART_COUNT', '0') or '0'
    if not (job.isdigit() and restart.isdigit()):
        raise SystemExit(f'error: SLURM_JOB_ID={job!r} and SLURM_RESTART_COUNT={restart!r}: expected numbers '
                         '(or set MASTER_PORT)')
    slot = int(job) * RESTARTS_PER_JOB + int(restart) % RESTARTS_PER_JOB
    return str(JOB_PORTS.start + slot % len(JOB_PORTS))


def init_cpu_distributed(cfg: Config) -> None:
    """On a machine without CUDA, join the gloo process group that ``cfg.launcher`` describes.

    ``slurm`` reads the rank layout from the ``SLURM_*`` variables as mmengine does, and sets the
    job's ``MASTER_PORT`` (:func:`slurm_master_port`) on every machine: with CUDA, mmengine's own
    launcher, which this then leaves to start the group, reads it from there. Does nothing else when
    CUDA is available or when not launched distributed.
    """
    if cfg.launcher not in LAUNCHERS:
        raise SystemExit(f'error: launcher {cfg.launcher!r} is not supported; expected one of {LAUNCHERS}')
    if cfg.launcher == 'slurm':
        os.environ['MASTER_PORT'] = slurm_master_port(os.environ)
    if cfg.launcher == 'none' or torch.cuda.is_available() or dist.is_initialized():
        return
    if cfg.launcher == 'slurm':
        os.environ.setdefault('RANK', os.environ['SLURM_PROCID'])
        os.environ.setdefault('WORLD_SIZE', os.environ['SLURM_NTASKS'])
        os.environ.setdefault('LOCAL_RANK', os.environ['SLURM_LOCALID'])
        os.environ.setdefault('MASTER_ADDR', _first_slurm_host())
    with a_taken_port_in_one_line():
        dist.init_process_group(backend='gloo')
    cfg.model_wrapper_cfg = dict(type='MMDistributedDataParallel', device_ids=None)
    cfg.setdefault('env_cfg', {}).setdefault('dist_cfg', {})['backend'] = 'gloo'


@contextmanager
def a_taken_port_in_one_line() -> Iterator[None]:
    """A process group's start failing on a rendezvous port that another program holds ends in one
    line naming the port (torch raises ``DistNetworkError ... EADDRINUSE`` with a traceback)."""
    try:
        yield
    except dist.DistNetworkError as error:
        if 'EADDRINUSE' not in str(error):
            raise
        raise SystemExit(f"error: MASTER_PORT {os.environ.get('MASTER_PORT')} on {os.environ.get('MASTER_ADDR')} is "
                         'taken by another program (EADDRINUSE); set MASTER_PORT (PORT for dist_train.sh) to a free '
                         'port') from None


def _first_slurm_host() -> str:
    import subprocess
    nodes = os.environ['SLURM_NODELIST']
    return subprocess.check_output(['scontrol', 'show', 'hostnames', nodes], text=True).split()[0]


def checkpoint_to_load(cfg: Config) -> Optional[str]:
    """The checkpoint the Runner will load: ``load_from``, or on ``resume`` without a path the one
    the work dir's ``last_checkpoint`` names (None when there is none: training starts afresh)."""
    from mmengine.runner import find_latest_checkpoint
    if cfg.get('resume') and not cfg.get('load_from'):
        return find_latest_checkpoint(cfg.work_dir) if osp.isdir(cfg.work_dir) else None
    return cfg.get('load_from')


def adopt_checkpoint_seed(cfg: Config, checkpoint: dict) -> None:
    """Resume with the seed of the interrupted run. mmengine restores it only after the
    dataloaders are built, so with ``randomness.seed=None`` (every config's default) the sampler
    order and the workers' augmentations of a resumed run would follow a new seed."""
    seed = checkpoint.get('meta', {}).get('seed')
    randomness = dict(cfg.get('randomness') or {})
    if seed is not None and randomness.get('seed') is None:
        cfg.randomness = dict(randomness, seed=seed)


def collect_in_log_dir(runner, loop_name: str) -> None:
    """Let the metrics of ``runner.<loop_name>`` gather the ranks' results in the run's log folder.

    mmengine's metrics exchange results through files; without a ``collect_dir`` they write them to
    ``.dist_test/`` under the current directory, which is left behind, outside the work folder. The
    stock metrics (``CocoMetric``, ``IoUMetric``) do not take ``collect_dir`` as a config argument,
    so it is set on the built metrics; mmengine creates the folder and removes it after each gather."""
    loop = getattr(runner, loop_name)
    for metric in getattr(getattr(loop, 'evaluator', None), 'metrics', ()):
        if getattr(metric, 'collect_dir', None) is None:
            metric.collect_dir = osp.join(runner.log_dir, 'collect')


def run(cfg: Config, action: str, dataloaders: Sequence[str], allow_partial_checkpoint: bool = False) -> None:
    """Check the data and the checkpoint, join the process group, build the Runner and call
    ``runner.<action>()``. Bad input, a non-finite loss and data faults found while the run goes
    (a corrupted annotation file, an empty dataset, an undecodable image) exit in one line.

    ``tools/test.py`` evaluates only a checkpoint that sets every weight of the model, unless
    ``allow_partial_checkpoint``."""
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner

    check_data_files(cfg, dataloaders)
    path = checkpoint_to_load(cfg)
    checkpoint = read_run_checkpoint(path) if path else None
    if checkpoint is not None and action == 'train' and cfg.get('resume'):
        adopt_checkpoint_seed(cfg, checkpoint)
    init_cpu_distributed(cfg)
    with a_taken_port_in_one_line():  # with CUDA the Runner starts the process group
        runner = Runner.from_cfg(cfg) if 'runner_type' not in cfg else RUNNERS.build(cfg)
    if cfg.launcher != 'none':
        collect_in_log_dir(runner, 'test_loop' if action == 'test' else 'val_loop')
    if checkpoint is not None and action == 'test' and not allow_partial_checkpoint:
        check_model_fits_checkpoint(runner.model, checkpoint, path)
    del checkpoint  # the Runner reads the file itself
    try:
        getattr(runner, action)()
    except (NonFiniteLoss, CheckpointError) as exc:  # a non-finite loss; pretrained weights that do not load
        raise SystemExit(f'error: {exc}') from None
    except Exception as exc:
        message = diagnose_failure(cfg, dataloaders, exc)
        if message:
            raise SystemExit(message) from None
        raise
