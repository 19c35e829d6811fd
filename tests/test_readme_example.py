"""The README's "plugging a backbone into another config" example builds and runs in mmdet, and the
inference guide's Python lines run as written."""
import re
import sys

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


def test_readme_inference_lines_run_on_cpu(tmp_path):
    """The inference guide's Python lines, as written, on a machine without a GPU: run where the
    guide's relative names resolve, with weights of each config's model and two images."""
    import cv2
    import numpy as np

    from mmvisattn.registry import build_from_config

    from .conftest import run_command, tool_env
    guide = (REPO / 'docs/user_guides/inference.md').read_text()
    example = re.search(r'```python\n(.*?)```', guide, re.S).group(1)
    for config, weights in re.findall(r"'(configs/[^']+\.py)',\s*'([^']+\.pth)'", example):
        # saved as a Runner saves it (mmseg reads 'meta')
        model = build_from_config(str(REPO / config))
        torch.save({'meta': {}, 'state_dict': model.state_dict()}, tmp_path / weights)
    for image in set(re.findall(r"'(\w+\.(?:jpg|png))'", example)):
        cv2.imwrite(str(tmp_path / image),
                    np.random.default_rng(0).integers(0, 255, (96, 128, 3), np.uint8))
    (tmp_path / 'configs').symlink_to(REPO / 'configs')
    done = run_command([sys.executable, '-c', example], timeout=600, cwd=tmp_path, env=tool_env())
    assert done.returncode == 0, done.stderr[-4000:]
    assert list((tmp_path / 'outputs' / 'vis').iterdir())
