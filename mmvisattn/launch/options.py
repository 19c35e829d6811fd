"""The stock tools' flags, with the meaning mmdet's, mmseg's and mmpretrain's ``tools/train.py`` and
``tools/test.py`` give them, applied as changes to the config, plus ``--requeue``. Where the stock
tool raises, these exit in one line."""
import os
from copy import deepcopy
from typing import Optional, Sequence

from mmengine.config import Config, ConfigDict

DUMP_SUFFIXES = ('.pkl', '.pickle')
METRICS_SUFFIXES = ('.json', '.yaml', '.yml', '.pkl', '.pickle')


def enable_auto_scale_lr(cfg: Config) -> None:
    """``--auto-scale-lr``: scale the learning rate by the total batch over
    ``auto_scale_lr.base_batch_size``."""
    if 'base_batch_size' not in (cfg.get('auto_scale_lr') or {}):
        raise SystemExit('error: --auto-scale-lr needs auto_scale_lr.base_batch_size in the config '
                         '(the batch its '
                         'learning rate is for), e.g. auto_scale_lr = dict(base_batch_size=16)')
    cfg.auto_scale_lr.enable = True


def enable_requeue(cfg: Config) -> None:
    """``--requeue``: the ``PreemptionHook`` requeues the Slurm job after its checkpoint."""
    hooks = [hook for hook in cfg.get('custom_hooks') or [] if hook.get('type') == 'PreemptionHook']
    if not hooks:
        raise SystemExit("error: --requeue needs a PreemptionHook in the config's custom_hooks "
                         '(configs/_base_/safeguard_hooks.py adds one)')
    for hook in hooks:
        hook['requeue'] = True


def resume_of_requeued_job(resume: Optional[str]) -> Optional[str]:
    """``--resume`` as given, or ``'auto'`` in a requeued Slurm job."""
    restarts = os.environ.get('SLURM_RESTART_COUNT', '')
    return 'auto' if resume is None and restarts.isdigit() and int(restarts) > 0 else resume


def skip_validation(cfg: Config) -> None:
    """``--no-validate``: train without the validation loop."""
    cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None


def loader_options(cfg: Config, loaders: Sequence[str], pin_memory: bool = True,
                   persistent_workers: bool = True) -> None:
    """``--no-pin-memory`` / ``--no-persistent-workers``: off in every dataloader of ``loaders``."""
    for name in loaders:
        if cfg.get(name):
            if not pin_memory:
                cfg[name]['pin_memory'] = False
            if not persistent_workers:
                cfg[name]['persistent_workers'] = False


def show_predictions(cfg: Config, show_dir: Optional[str], show: bool, wait_time: float,
                     interval: int = 1) -> None:
    """``--show-dir`` / ``--show``: the scope's visualisation hook draws every ``interval``-th test
    image into ``show_dir`` and, with ``show``, in a window."""
    hook = cfg.default_hooks.get('visualization')
    if hook is None:
        raise SystemExit('error: --show and --show-dir need default_hooks.visualization in the '
                         'config')
    hook.update(interval=interval)
    if cfg.default_scope == 'mmpretrain':  # its hook is switched by ``enable``
        hook.update(enable=True)
    else:
        hook.update(draw=True)
    if show:
        hook.update(show=True, wait_time=wait_time)
    if show_dir is None:
        return
    if cfg.default_scope == 'mmdet':
        hook['test_out_dir'] = show_dir
    elif cfg.default_scope == 'mmpretrain':
        hook['out_dir'] = f'{cfg.work_dir}/{show_dir}'
    else:
        cfg.visualizer['save_dir'] = f'{cfg.work_dir}/{show_dir}'


def dump_predictions(cfg: Config, out: str) -> None:
    """``--out``: mmdet and mmpretrain configs dump predictions to a ``.pkl`` file, mmseg configs
    write label maps into the folder ``out``."""
    if cfg.default_scope == 'mmseg':
        cfg.test_evaluator.update(output_dir=out, keep_results=True)
        return
    if not out.endswith(DUMP_SUFFIXES):
        raise SystemExit(f'error: --out {out!r}: expected a file ending in '
                         f'{" or ".join(DUMP_SUFFIXES)} (mmdet '
                         'and mmpretrain configs dump their predictions with pickle)')
    evaluators = cfg.test_evaluator if isinstance(cfg.test_evaluator,
                                                  list) else [cfg.test_evaluator]
    dump = 'DumpDetResults' if cfg.default_scope == 'mmdet' else 'DumpResults'
    cfg.test_evaluator = [*evaluators, dict(type=dump, out_file_path=out)]


def metrics_file(out: str) -> str:
    """``--out FILE --out-item metrics``: ``FILE``, refused in one line before the test runs unless
    mmengine writes its suffix (JSON, YAML or pickle)."""
    if not out.endswith(METRICS_SUFFIXES):
        raise SystemExit(f'error: --out {out!r}: expected a file ending in '
                         f'{", ".join(METRICS_SUFFIXES)} for the metrics (--out-item metrics)')
    return out


def _default_detection_tta(cfg: Config) -> None:
    """mmdet's ``tools/test.py`` defaults: horizontal flip, merged by NMS."""
    cfg.setdefault('tta_model',
                   dict(type='DetTTAModel', tta_cfg=dict(nms=dict(type='nms', iou_threshold=0.5),
                                                                      max_per_img=100)))
    if 'tta_pipeline' in cfg:
        return
    dataset = cfg.test_dataloader.dataset
    while 'dataset' in dataset:
        dataset = dataset['dataset']
    pack = dict(type='PackDetInputs',
                meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor',
                                                 'flip', 'flip_direction'))
    flips = [dict(type='RandomFlip', prob=1.0), dict(type='RandomFlip', prob=0.0)]
    cfg.tta_pipeline = [*deepcopy(dataset.pipeline)[:-1],
                        dict(type='TestTimeAug', transforms=[flips, [pack]])]


def _default_classification_tta(cfg: Config) -> None:
    """mmpretrain's ``tools/test.py`` default: class scores of the image and its flip, averaged."""
    cfg.setdefault('tta_model', dict(type='mmpretrain.AverageClsScoreTTA'))
    if 'tta_pipeline' in cfg:
        return
    pipeline = deepcopy(cfg.test_dataloader.dataset.pipeline)
    flips = [dict(type='RandomFlip', prob=1.0), dict(type='RandomFlip', prob=0.0)]
    cfg.tta_pipeline = [*pipeline[:-1],
                        dict(type='TestTimeAug', transforms=[flips, [pipeline[-1]]])]


def test_time_augmentation(cfg: Config, drawn: bool = False) -> None:
    """``--tta``: the config's ``tta_model`` and ``tta_pipeline`` (mmdet and mmpretrain take flip
    defaults, mmseg configs must name them). ``drawn``: with ``--show`` / ``--show-dir``, which
    mmpretrain's hook cannot do on augmented batches."""
    if drawn and cfg.default_scope == 'mmpretrain':
        raise SystemExit("error: --tta with --show / --show-dir: mmpretrain's VisualizationHook "
                         "cannot draw "
                         'test-time-augmented batches; draw in a run without --tta')
    if cfg.default_scope == 'mmdet':
        _default_detection_tta(cfg)
    elif cfg.default_scope == 'mmpretrain':
        _default_classification_tta(cfg)
    missing = [key for key in ('tta_model', 'tta_pipeline') if key not in cfg]
    if missing:
        raise SystemExit(f'error: --tta needs {" and ".join(missing)} in the config (mmseg configs '
                         'name their test-time augmentation; see the stock mmseg configs)')
    cfg.model = ConfigDict(**cfg.tta_model, module=cfg.model)
    cfg.test_dataloader.dataset.pipeline = cfg.tta_pipeline
