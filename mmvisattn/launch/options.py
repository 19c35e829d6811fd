"""The stock tools' flags, with the meaning mmdet's and mmseg's own ``tools/train.py`` and
``tools/test.py`` give them for the config's scope, as changes to the config (so the Runner built
from it needs nothing more): ``--auto-scale-lr``, ``--show`` / ``--show-dir`` / ``--wait-time``,
``--out`` and ``--tta``; and ``tools/train.py``'s own ``--requeue``. Where the stock tool raises an
assertion or a traceback, these exit in one line."""
import os
from copy import deepcopy
from typing import Optional

from mmengine.config import Config, ConfigDict

DUMP_SUFFIXES = ('.pkl', '.pickle')


def enable_auto_scale_lr(cfg: Config) -> None:
    """``--auto-scale-lr``: scale the learning rate by the total batch over ``auto_scale_lr.base_batch_size``."""
    if 'base_batch_size' not in (cfg.get('auto_scale_lr') or {}):
        raise SystemExit('error: --auto-scale-lr needs auto_scale_lr.base_batch_size in the config (the batch its '
                         'learning rate is for), e.g. auto_scale_lr = dict(base_batch_size=16)')
    cfg.auto_scale_lr.enable = True


def enable_requeue(cfg: Config) -> None:
    """``--requeue``: the config's ``PreemptionHook`` requeues the Slurm batch job after its checkpoint."""
    hooks = [hook for hook in cfg.get('custom_hooks') or [] if hook.get('type') == 'PreemptionHook']
    if not hooks:
        raise SystemExit("error: --requeue needs a PreemptionHook in the config's custom_hooks "
                         '(configs/_base_/safeguard_hooks.py adds one)')
    for hook in hooks:
        hook['requeue'] = True


def resume_of_requeued_job(resume: Optional[str]) -> Optional[str]:
    """``--resume`` as given, or ``'auto'`` in a Slurm job that was requeued (``SLURM_RESTART_COUNT``
    above 0): the job runs its command again, and continues from its work dir's last checkpoint."""
    restarts = os.environ.get('SLURM_RESTART_COUNT', '')
    return 'auto' if resume is None and restarts.isdigit() and int(restarts) > 0 else resume


def show_predictions(cfg: Config, show_dir: Optional[str], show: bool, wait_time: float) -> None:
    """``--show-dir`` / ``--show``: the visualisation hook of either scope draws every test image
    into ``show_dir`` (under the work dir) and, with ``show``, in a window for ``wait_time`` s."""
    hook = cfg.default_hooks.get('visualization')
    if hook is None:
        raise SystemExit('error: --show and --show-dir need default_hooks.visualization in the config')
    hook.update(draw=True, interval=1)
    if show:
        hook.update(show=True, wait_time=wait_time)
    if show_dir is None:
        return
    if cfg.default_scope == 'mmdet':
        hook['test_out_dir'] = show_dir
    else:
        cfg.visualizer['save_dir'] = f'{cfg.work_dir}/{show_dir}'


def dump_predictions(cfg: Config, out: str) -> None:
    """``--out``: mmdet configs dump the raw predictions to a ``.pkl`` file (``DumpDetResults``),
    mmseg configs write the predicted label maps into the folder ``out``."""
    if cfg.default_scope == 'mmseg':
        cfg.test_evaluator.update(output_dir=out, keep_results=True)
        return
    if not out.endswith(DUMP_SUFFIXES):
        raise SystemExit(f'error: --out {out!r}: expected a file ending in {" or ".join(DUMP_SUFFIXES)} (mmdet '
                         'configs dump their predictions with pickle)')
    evaluators = cfg.test_evaluator if isinstance(cfg.test_evaluator, list) else [cfg.test_evaluator]
    cfg.test_evaluator = [*evaluators, dict(type='DumpDetResults', out_file_path=out)]


def _default_detection_tta(cfg: Config) -> None:
    """mmdet's ``tools/test.py`` defaults: horizontal flip, merged by NMS."""
    cfg.setdefault('tta_model', dict(type='DetTTAModel', tta_cfg=dict(nms=dict(type='nms', iou_threshold=0.5),
                                                                      max_per_img=100)))
    if 'tta_pipeline' in cfg:
        return
    dataset = cfg.test_dataloader.dataset
    while 'dataset' in dataset:
        dataset = dataset['dataset']
    pack = dict(type='PackDetInputs', meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor',
                                                 'flip', 'flip_direction'))
    flips = [dict(type='RandomFlip', prob=1.0), dict(type='RandomFlip', prob=0.0)]
    cfg.tta_pipeline = [*deepcopy(dataset.pipeline)[:-1], dict(type='TestTimeAug', transforms=[flips, [pack]])]


def test_time_augmentation(cfg: Config) -> None:
    """``--tta``: the config's ``tta_model`` around its model and ``tta_pipeline`` for the test set
    (mmdet configs without them take mmdet's flip default, mmseg configs must name them)."""
    if cfg.default_scope == 'mmdet':
        _default_detection_tta(cfg)
    missing = [key for key in ('tta_model', 'tta_pipeline') if key not in cfg]
    if missing:
        raise SystemExit(f'error: --tta needs {" and ".join(missing)} in the config (mmseg configs name their '
                         'test-time augmentation; see the stock mmseg configs)')
    cfg.model = ConfigDict(**cfg.tta_model, module=cfg.model)
    cfg.test_dataloader.dataset.pipeline = cfg.tta_pipeline
