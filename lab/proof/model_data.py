"""The data and configs of ``gpu_proof_models.py``: shapes images at a dataset's size and layout,
and a shipped config derived to train on them briefly with :mod:`.model_probe`'s hook."""
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from mmvisattn.configs import config_file
from mmvisattn.utils import demo_data


def read_config(name: str):
    """A config: stock ``mmdet::...`` / ``mmseg::...``, a file, or one the package ships."""
    from mmengine.config import Config
    from mmengine.hub import get_config
    return get_config(name) if '::' in name else Config.fromfile(str(config_file(name)))


# (height, width) of the synthetic images of each layout: the datasets' own (COCO's 1333 x 800 after
# its resize, a Cityscapes frame, an ADE20K crop's scale)
LAYOUT_SIZES = dict(coco=(800, 1333), cityscapes=(1024, 2048), ade20k=(512, 512))
LAYOUT_OF = dict(CocoDataset='coco', CityscapesDataset='cityscapes', ADE20KDataset='ade20k')
LAYOUT_ROOT = dict(coco='coco/', cityscapes='cityscapes/', ade20k='ade20k/ADEChallengeData2016/')
SHAPE_CLASSES = ('circle', 'rectangle', 'triangle')


def layout_of(node: Dict) -> Optional[str]:
    """The layout a dataset config reads: by its type, else (a ``BaseSegDataset`` of Cityscapes
    files, say) by the last folder of its ``data_root`` that names one."""
    if node.get('type') in LAYOUT_OF:
        return LAYOUT_OF[node['type']]
    if 'data_root' not in node:
        return None
    folders = [part for part in str(node['data_root']).lower().split('/') if part]
    found = [layout for part in folders for layout in LAYOUT_ROOT if part.startswith(layout[:3])]
    return found[-1] if found else None


def dataset_layouts(cfg) -> List[str]:
    """The layouts of every dataset the config's dataloaders read."""
    layouts = []

    def walk(node) -> None:
        if isinstance(node, dict):
            if layout_of(node):
                layouts.append(layout_of(node))
            for value in node.values():
                walk(value)
        elif isinstance(node, (list, tuple)):
            for value in node:
                walk(value)
    for name in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        walk(cfg.get(name))
    if not layouts:
        raise SystemExit(f'error: no dataset of {sorted(LAYOUT_OF)} (or with a data_root naming '
                         f'one of {sorted(LAYOUT_ROOT)}) in the config\'s dataloaders')
    return sorted(set(layouts))


def write_data(out: Path, layout: str, size: Tuple[int, int], images: int) -> Path:
    """Synthetic shapes images of ``size`` in the dataset's layout
    (:mod:`mmvisattn.utils.demo_data`); its root."""
    height, width = size
    root = out / 'data' / f'{layout}-{height}x{width}-{images}'
    demo_data.main(['--out', str(root), '--num-train', str(images), '--num-val', str(images),
                    '--size', str(height), '--width', str(width)])
    return root / LAYOUT_ROOT[layout]


def rewrite_data(node, roots: Dict[str, Path], coco_classes: bool):
    """``node`` with every dataset's ``data_root`` (and each path under the old root) on the
    synthetic data; COCO datasets read the shapes' classes."""
    if isinstance(node, (list, tuple)):
        return type(node)(rewrite_data(value, roots, coco_classes) for value in node)
    if not isinstance(node, dict):
        return node
    node = {key: rewrite_data(value, roots, coco_classes) for key, value in node.items()}
    layout = layout_of(node)
    if layout is not None:
        node['data_root'] = str(roots[layout]) + '/'
        if layout == 'coco' and coco_classes:
            node['metainfo'] = dict(classes=SHAPE_CLASSES)
    return node


def derive_config(job: Dict, iters: int, smoke: bool, roots: Dict[str, Path], work: Path) -> Path:
    """The shipped config on the synthetic data for ``iters`` iterations, a final checkpoint, no
    pretrained weights, the probe hook (``smoke``: batch 2, no workers), written into ``work``; its
    path."""
    cfg = read_config(job['config'])
    cfg.merge_from_dict(job.get('options', {}))
    for name in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        loader = rewrite_data(cfg[name].to_dict() if hasattr(cfg[name], 'to_dict') else cfg[name],
                              roots, True)
        loader['num_workers'] = 0 if smoke else min(loader.get('num_workers', 2), 4)
        if smoke:  # the test loop's first batch is a warm-up: one image a batch leaves one timed
            loader['batch_size'] = 2 if name == 'train_dataloader' else 1
        loader['persistent_workers'] = loader['num_workers'] > 0
        cfg[name] = loader
    for name in ('val_evaluator', 'test_evaluator'):
        evaluator = cfg.get(name)
        if isinstance(evaluator, dict) and str(evaluator.get('ann_file', '')).endswith('.json'):
            evaluator['ann_file'] = str(
                roots['coco'] / 'annotations' / Path(evaluator['ann_file']).name
            )
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=iters, val_interval=10 ** 9)
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', by_epoch=False, interval=10 ** 9,
                                        save_last=True, max_keep_ckpts=1)
    cfg.default_hooks.logger = dict(type='LoggerHook', interval=5)
    cfg.log_processor = dict(type='LogProcessor', by_epoch=False, window_size=5)
    cfg.model.backbone.init_cfg = None  # no pretrained weights here
    cfg.load_from, cfg.resume = None, False
    cfg.randomness = dict(seed=0)
    imports = list(cfg.get('custom_imports', {}).get('imports', []))
    cfg.custom_imports = dict(imports=[*dict.fromkeys([*imports, 'mmvisattn',
                                                       'lab.proof.model_probe'])],
                              allow_failed_imports=False)
    probe = dict(type='ModelProofProbe', out_dir=str(work), memory_cap_mb=job.get('memory_cap_mb'))
    cfg.custom_hooks = [*cfg.get('custom_hooks', []), probe]
    work.mkdir(parents=True, exist_ok=True)
    path = work / 'config.py'
    cfg.dump(str(path))
    return path
