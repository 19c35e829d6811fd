"""The checks that make bad input fail in one line naming the file and what was expected: data
roots, annotation files and image folders before the Runner is built, checkpoints before loading,
and, after a failure, the data faults only a run shows (a corrupted annotation file, an empty
dataset, an undecodable image)."""
import importlib
import json
import os.path as osp
import re
from typing import Dict, Iterator, Optional, Sequence, Tuple

from mmengine.config import Config
from mmengine.model import BaseTTAModel, is_model_wrapper
from torch import Tensor, nn

from ..utils.checkpoint import CheckpointError, read_checkpoint, state_dict_of

DATA_PREFIX_FOLDERS = ('img', 'img_path', 'seg', 'seg_map_path')
COCO_KEYS = ('images', 'annotations', 'categories')
UNDECODABLE_IMAGE = re.compile(r'failed to load image: (\S+)')


def configured_datasets(cfg: Config, dataloaders: Sequence[str]) -> Iterator[Tuple[str, dict]]:
    """``(dataloader name, dataset config)`` for every leaf dataset of the named dataloaders."""
    for name in dataloaders:
        loader = cfg.get(name)
        if loader:
            for dataset in _leaf_datasets(loader['dataset']):
                yield name, dataset


def _leaf_datasets(dataset: dict) -> Iterator[dict]:
    """The datasets inside wrappers (RepeatDataset, ConcatDataset, MultiImageMixDataset...)."""
    if 'dataset' in dataset:
        yield from _leaf_datasets(dataset['dataset'])
    elif 'datasets' in dataset:
        for child in dataset['datasets']:
            yield from _leaf_datasets(child)
    else:
        yield dataset


def check_data_files(cfg: Config, dataloaders: Sequence[str]) -> None:
    """Fail with one line when a dataloader's ``data_root``, annotation file or image / label
    folder is missing, before any model is built."""
    for name, dataset in configured_datasets(cfg, dataloaders):
        root = dataset.get('data_root') or ''
        if root and not osp.isdir(root):
            hint = (' (write the demo data with: python tools/misc/make_demo_data.py --out '
                    'data/shapes)'
                    if 'shapes' in root else '')
            raise SystemExit(f'error: {name}.dataset.data_root {root!r} does not exist{hint}')
        ann_file = dataset.get('ann_file')
        if ann_file and not osp.isfile(osp.join(root, ann_file)):
            raise SystemExit(f'error: {name}.dataset.ann_file {osp.join(root, ann_file)!r} does '
                             'not exist')
        prefix = dataset.get('data_prefix') or {}
        # mmpretrain's datasets also take the image folder as a string
        for key, folder in (dict(img_path=prefix) if isinstance(prefix, str) else prefix).items():
            if key in DATA_PREFIX_FOLDERS and folder and not osp.isdir(osp.join(root, folder)):
                raise SystemExit(f'error: {name}.dataset.data_prefix.{key} folder '
                                 f'{osp.join(root, folder)!r} does not exist')


def read_run_checkpoint(path: str) -> dict:
    """:func:`read_checkpoint` for the tools: a bad file exits in one line."""
    try:
        return read_checkpoint(path)
    except CheckpointError as exc:
        raise SystemExit(f'error: {exc}') from None


def model_weights(checkpoint: dict, path: str) -> Dict[str, Tensor]:
    """The checkpoint's state dict under the model's own names (``module.`` prefix dropped)."""
    return {
        re.sub(r'^module\.', '', key): value
        for key, value in state_dict_of(checkpoint, path).items()
    }


def check_model_fits_checkpoint(model: nn.Module, checkpoint: dict, path: str,
                                remedy: str = 'pass --allow-partial-checkpoint to evaluate it '
                                'anyway') -> None:
    """Exit in one line, ending with ``remedy``, unless ``checkpoint`` sets every weight of
    ``model`` with the right shape and nothing else."""
    # a wrapper's or a TTA model's weights are its module's (as mmengine loads them)
    model = model.module if is_model_wrapper(model) or isinstance(model, BaseTTAModel) else model
    expected = model.state_dict()
    weights = model_weights(checkpoint, path)
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    misshapen = sorted(key for key in set(expected) & set(weights)
                       if expected[key].shape != weights[key].shape)
    if not (missing or unexpected or misshapen):
        return
    faults = [f'{len(keys)} {what} (e.g. {keys[0]})' for keys, what in (
        (missing, f'of the model\'s {len(expected)} weights are not in it'),
        (unexpected, 'of its tensors have no place in the model'),
        (misshapen, 'have another shape')) if keys]
    raise SystemExit(f'error: checkpoint {path!r} does not fit the model: {"; ".join(faults)}; '
                     f'{remedy}')


def diagnose_failure(cfg: Config, dataloaders: Sequence[str], exc: BaseException) -> Optional[str]:
    """The one-line cause of a failed run when it is bad data, else None. Called only after a run
    failed, so a healthy run never reads its annotations twice."""
    undecodable = UNDECODABLE_IMAGE.search(str(exc))
    if undecodable:
        return (f'error: image {undecodable.group(1)!r} cannot be decoded (not an image file, or '
                'damaged)')
    return find_corrupted_annotation(cfg, dataloaders) or find_empty_dataset(cfg, dataloaders)


def find_corrupted_annotation(cfg: Config, dataloaders: Sequence[str]) -> Optional[str]:
    """Name the first JSON annotation file of ``dataloaders`` that is not a readable COCO file."""
    for _, dataset in configured_datasets(cfg, dataloaders):
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
            return (f'error: corrupted annotation file {path!r}: expected COCO keys {COCO_KEYS}, '
                    f'missing {missing}')
    return None


def find_empty_dataset(cfg: Config, dataloaders: Sequence[str]) -> Optional[str]:
    """Name the first dataset of ``dataloaders`` that holds no sample after its filters."""
    registry = importlib.import_module(f'{cfg.default_scope}.registry').DATASETS
    for name, dataset in configured_datasets(cfg, dataloaders):
        try:
            built = registry.build(dict(dataset, serialize_data=False, pipeline=[]))
        except Exception:  # another fault: the run's own error says more than a second attempt
            continue
        if len(built) == 0:
            where = dataset.get('ann_file') or dataset.get('data_prefix')
            return (f'error: {name}.dataset holds no samples (data_root '
                    f'{dataset.get("data_root")!r}, {where!r}); '
                    'expected at least one image with annotations')
    return None
