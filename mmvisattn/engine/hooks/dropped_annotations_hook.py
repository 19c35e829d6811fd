"""Report the annotations a detection dataset drops while it loads, instead of training without
them in silence."""
from typing import Dict, Iterator

from mmengine.hooks import Hook
from mmengine.registry import HOOKS

# mmdet 3.3's CocoDataset.parse_data_info skips these annotations without a word, in this order.
DROP_REASONS = {
    'outside': 'outside the image',
    'degenerate': 'degenerate (area <= 0 or a side under 1 px)',
    'unknown_category': 'of a category the dataset does not train',
}


def drop_reason(annotation: dict, image: dict, category_ids) -> str:
    """Why ``CocoDataset.parse_data_info`` drops ``annotation`` of ``image``, '' when it keeps it
    (``ignore`` annotations are meant to be skipped and are not counted)."""
    if annotation.get('ignore', False):
        return ''
    x, y, w, h = annotation['bbox']
    inside_w = max(0, min(x + w, image['width']) - max(x, 0))
    inside_h = max(0, min(y + h, image['height']) - max(y, 0))
    if inside_w * inside_h == 0:
        return 'outside'
    if annotation['area'] <= 0 or w < 1 or h < 1:
        return 'degenerate'
    if annotation['category_id'] not in category_ids:
        return 'unknown_category'
    return ''


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
    """At the start of every training epoch (once for iteration-based schedules), log a warning
    for each training dataset that dropped annotations while loading: how many of how many, and
    why. mmdet drops boxes outside the image, degenerate boxes and unknown categories silently, so
    a dataset whose boxes are all out of place trains with a zero box loss and no other sign.
    Counting covers mmdet's ``CocoDataset`` and its subclasses (:func:`mmvisattn.compat.count_dropped_annotations`,
    installed on ``import mmvisattn``); segmentation datasets read whole label maps and drop nothing.
    """

    def before_run(self, runner) -> None:
        """Without the counting patch there is nothing to report: one line says so."""
        from mmdet.datasets import CocoDataset
        if not getattr(CocoDataset.parse_data_info, 'counts_drops', False):
            raise SystemExit('error: DroppedAnnotationsHook needs the patch count_dropped_annotations, which '
                             'MMVISATTN_SKIP_PATCHES leaves out')

    def before_train_epoch(self, runner) -> None:
        for dataset in leaf_datasets(runner.train_dataloader.dataset):
            counter: Dict[str, int] = getattr(dataset, 'dropped_annotations', None)
            dropped = sum(counter[reason] for reason in DROP_REASONS) if counter else 0
            if dropped:
                reasons = ', '.join(f'{counter[key]} {text}' for key, text in DROP_REASONS.items() if counter[key])
                runner.logger.warning(f'{dataset.ann_file}: dropped {dropped} of {counter["total"]} annotations '
                                      f'while loading ({reasons})')
