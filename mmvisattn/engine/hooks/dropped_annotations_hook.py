"""Report the annotations a detection dataset drops while it loads, instead of training without
them in silence."""
from typing import Dict, Iterator

from mmengine.hooks import Hook
from mmengine.registry import HOOKS

from ...compat import DROP_REASONS, SKIP_VARIABLE, apply, count_dropped_annotations


def leaf_datasets(dataset) -> Iterator:
    """The datasets inside wrappers (RepeatDataset, ConcatDataset, MultiImageMixDataset...)."""
    if hasattr(dataset, 'datasets'):
        for child in dataset.datasets:
            yield from leaf_datasets(child)
    elif hasattr(dataset, 'dataset'):
        yield from leaf_datasets(dataset.dataset)
    else:
        yield dataset


@HOOKS.register_module()
class DroppedAnnotationsHook(Hook):
    """Warn, at each training epoch's start, for every training dataset that dropped annotations
    while loading: how many of how many, and why (mmdet drops out-of-image, degenerate and
    unknown-category boxes silently, so misplaced boxes train on a zero box loss). Covers
    ``CocoDataset`` and subclasses through :func:`mmvisattn.compat.count_dropped_annotations`,
    applied when the hook is built (before the datasets)."""

    def __init__(self) -> None:
        from mmdet.datasets import CocoDataset
        apply(count_dropped_annotations)
        if not getattr(CocoDataset.parse_data_info, 'counts_drops', False):
            raise SystemExit('error: DroppedAnnotationsHook needs the patch '
                             f'count_dropped_annotations, which {SKIP_VARIABLE} leaves out')

    def before_train_epoch(self, runner) -> None:
        for dataset in leaf_datasets(runner.train_dataloader.dataset):
            counter: Dict[str, int] = getattr(dataset, 'dropped_annotations', None)
            dropped = sum(counter[reason] for reason in DROP_REASONS) if counter else 0
            if dropped:
                reasons = ', '.join(
                    f'{counter[key]} {text}' for key, text in DROP_REASONS.items() if counter[key]
                )
                runner.logger.warning(f'{dataset.ann_file}: dropped {dropped} of '
                                      f'{counter["total"]} annotations while loading ({reasons})')
