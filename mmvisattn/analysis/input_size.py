"""The input size a config tests at: slide inference's crop, else the test pipeline's ``Resize``
scale, padded as the data preprocessor pads (``print_dispatch.py`` and ``get_flops.py`` default to
it)."""
from typing import Optional, Sequence, Tuple

from mmengine.config import Config


def resize_scale(pipeline: Sequence[dict]) -> Optional[Tuple[int, int]]:
    for step in pipeline or ():
        scale = step.get('scale')
        if 'Resize' in str(step.get('type')) and scale is not None:
            sides = (scale, scale) if isinstance(scale, int) else tuple(scale)
            return min(sides), max(sides)
    return None


def test_input_size(cfg: Config, flag: str = '--input-size') -> Tuple[Tuple[int, int], str]:
    """``(H, W)`` of the config's test input and where it came from; without a size in the config,
    a one-line exit asking for ``flag``."""
    test_cfg = cfg.model.get('test_cfg') or {}
    if test_cfg.get('mode') == 'slide':
        size, source = tuple(test_cfg['crop_size']), 'model.test_cfg.crop_size (slide inference)'
    else:
        dataset = (cfg.get('test_dataloader') or {}).get('dataset', {})
        while 'dataset' in dataset:  # wrappers
            dataset = dataset['dataset']
        size = resize_scale(dataset.get('pipeline')) or resize_scale(cfg.get('test_pipeline'))
        if size is None:
            raise SystemExit(f'error: the test pipeline has no Resize scale; give {flag} H W')
        source = 'the test pipeline\'s Resize scale'
    divisor = (cfg.model.get('data_preprocessor') or {}).get('pad_size_divisor') or 1
    padded = tuple(-(-side // divisor) * divisor for side in size)
    return padded, source + (f', padded to a multiple of {divisor}' if divisor > 1 else '')
