"""The README's "plugging a backbone into another config" example builds and runs in mmdet."""
import re

import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from .conftest import REPO


def test_readme_plugging_example(tmp_path):
    readme = (REPO / 'README.md').read_text()
    section = readme.split('## Plugging a backbone into another config')[1]
    example = re.search(r'```python\n(.*?)```', section, re.S).group(1)
    (tmp_path / 'plugged.py').write_text(example)
    cfg = Config.fromfile(tmp_path / 'plugged.py')
    init_default_scope(cfg.default_scope)
    from mmdet.registry import MODELS
    model = MODELS.build(cfg.model)
    model.eval()
    features = model.extract_feat(torch.randn(1, 3, 128, 128))
    assert [f.shape[-1] for f in features] == [16, 8, 4, 2, 1]
