"""Start-up shared by ``tools/train.py`` and ``tools/test.py``: config loading, scope, data checks
and distributed initialisation that also works on CPU-only machines.

Stock mmengine 0.10.7 cannot launch on a CPU build of torch: its pytorch launcher calls
``torch.cuda.set_device`` unconditionally and its Runner wraps the model in DDP with
``device_ids=[LOCAL_RANK]``, which DDP rejects for CPU modules. Initialising a gloo process group
before the Runner exists makes mmengine skip its own initialisation, and ``device_ids=None`` lets
DDP wrap a CPU module.
"""
import os
import os.path as osp
from typing import Optional, Sequence

import torch
import torch.distributed as dist
from mmengine.config import Config

from ..engine.hooks import SAFEGUARD_HOOKS

SCOPES = ('mmdet', 'mmseg')
LAUNCHERS = ('none', 'pytorch', 'slurm')


def load_config(path: str, cfg_options: Optional[dict] = None, work_dir: Optional[str] = None,
                launcher: str = 'none') -> Config:
    """Load ``path``, apply ``--cfg-options`` and pick ``work_dir`` as the stock tools do."""
    if not osp.isfile(path):
        raise SystemExit(f'error: config file {path!r} does not exist')
    cfg = Config.fromfile(path)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    scope = cfg.get('default_scope')
    if scope not in SCOPES:
        raise SystemExit(f'error: config {path!r} has default_scope={scope!r}; expected one of {SCOPES}')
    cfg.launcher = launcher
    add_safeguard_hooks(cfg)
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(path))[0])
    return cfg


def add_safeguard_hooks(cfg: Config) -> None:
    """Exact resumption, a stop at the first non-finite loss and rank-averaged loss logging for
    every config: a ``default_hooks`` key the config sets wins, and ``None`` turns that hook off
    (mmengine itself accepts ``None`` only for its own default hooks)."""
    hooks = cfg.setdefault('default_hooks', {})
    for key, hook in SAFEGUARD_HOOKS.items():
        if key in hooks and hooks[key] is None:
            del hooks[key]
        else:
            hooks.setdefault(key, dict(hook))


def init_cpu_distributed(cfg: Config) -> None:
    """On a machine without CUDA, join the gloo process group that ``cfg.launcher`` describes.

    Does nothing when CUDA is available (mmengine's own launcher then works) or when not launched
    distributed. ``slurm`` reads the rank layout from the ``SLURM_*`` variables as mmengine does.
    """
    if cfg.launcher not in LAUNCHERS:
        raise SystemExit(f'error: launcher {cfg.launcher!r} is not supported; expected one of {LAUNCHERS}')
    if cfg.launcher == 'none' or torch.cuda.is_available() or dist.is_initialized():
        return
    if cfg.launcher == 'slurm':
        os.environ.setdefault('RANK', os.environ['SLURM_PROCID'])
        os.environ.setdefault('WORLD_SIZE', os.environ['SLURM_NTASKS'])
        os.environ.setdefault('LOCAL_RANK', os.environ['SLURM_LOCALID'])
        os.environ.setdefault('MASTER_PORT', '29500')
        os.environ.setdefault('MASTER_ADDR', _first_slurm_host())
    dist.init_process_group(backend='gloo')
    cfg.model_wrapper_cfg = dict(type='MMDistributedDataParallel', device_ids=None)
    cfg.setdefault('env_cfg', {}).setdefault('dist_cfg', {})['backend'] = 'gloo'


def _first_slurm_host() -> str:
    import subprocess
    nodes = os.environ['SLURM_NODELIST']
    return subprocess.check_output(['scontrol', 'show', 'hostnames', nodes], text=True).split()[0]


def check_data_roots(cfg: Config, dataloaders: Sequence[str]) -> None:
    """Fail with one line when a dataloader's ``data_root`` is missing, before any model is built."""
    for name, dataset in _configured_datasets(cfg, dataloaders):
        root = dataset.get('data_root')
        if root and not osp.isdir(root):
            hint = (' (write the demo data with: python tools/misc/make_demo_data.py --out data/shapes)'
                    if 'shapes' in root else '')
            raise SystemExit(f'error: {name}.dataset.data_root {root!r} does not exist{hint}')


def _configured_datasets(cfg: Config, dataloaders: Sequence[str]):
    """``(dataloader name, dataset config)`` for every leaf dataset of the named dataloaders."""
    for name in dataloaders:
        loader = cfg.get(name)
        if loader:
            for dataset in _leaf_datasets(loader['dataset']):
                yield name, dataset


def _leaf_datasets(dataset: dict):
    """The datasets inside wrappers (RepeatDataset, ConcatDataset, MultiImageMixDataset...)."""
    if 'dataset' in dataset:
        yield from _leaf_datasets(dataset['dataset'])
    elif 'datasets' in dataset:
        for child in dataset['datasets']:
            yield from _leaf_datasets(child)
    else:
        yield dataset


COCO_KEYS = ('images', 'annotations', 'categories')


def find_corrupted_annotation(cfg: Config, dataloaders: Sequence[str]) -> Optional[str]:
    """Name the first JSON annotation file of ``dataloaders`` that is not a readable COCO file.

    Called only after a run failed, so a healthy run never parses its annotations twice.
    """
    import json
    for _, dataset in _configured_datasets(cfg, dataloaders):
        ann_file = dataset.get('ann_file') or ''
        path = osp.join(dataset.get('data_root') or '', ann_file)
        if not ann_file.endswith('.json') or not osp.isfile(path):
            continue
        try:
            with open(path) as f:
                content = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return f'error: corrupted annotation file {path!r}: not valid JSON ({exc})'
        missing = [key for key in COCO_KEYS if not isinstance(content, dict) or key not in content]
        if missing:
            return f'error: corrupted annotation file {path!r}: expected COCO keys {COCO_KEYS}, missing {missing}'
    return None


def run(cfg: Config, action: str, dataloaders: Sequence[str]) -> None:
    """Check the data roots, join the process group, build the Runner and call ``runner.<action>()``.

    A failure caused by a corrupted annotation file is reported in one line naming the file.
    """
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner

    check_data_roots(cfg, dataloaders)
    init_cpu_distributed(cfg)
    runner = Runner.from_cfg(cfg) if 'runner_type' not in cfg else RUNNERS.build(cfg)
    try:
        getattr(runner, action)()
    except Exception:
        message = find_corrupted_annotation(cfg, dataloaders)
        if message:
            raise SystemExit(message) from None
        raise
