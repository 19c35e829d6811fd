"""``tools/analysis_tools/benchmark.py`` times any config as mmdet's and mmseg's ``benchmark.py``
do, on this machine's CPU too: a project demo and its stock twin, random weights or a checkpoint; a
checkpoint of another model is refused in one line."""
import json

import pytest
import torch

from mmvisattn.registry import build_from_config

from ..conftest import REPO, run_tool
from ..test_launch.conftest import fails_in_one_line

TOOL = 'tools/analysis_tools/benchmark.py'
VIL = REPO / 'configs/vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py'
STOCK = REPO / 'configs/demo/retinanet_r18_fpn_1xb8-600i_shapes-coco-128.py'
SHORT = ['--max-iter', 3, '--num-warmup', 1, '--log-interval', 1]


@pytest.mark.parametrize('config', [VIL, STOCK], ids=['ViL', 'stock RetinaNet-R18'])
def test_times_a_config_on_the_cpu(workspace, tmp_path, config):
    done = run_tool([TOOL, config, *SHORT, '--work-dir', tmp_path], cwd=workspace)
    result = json.loads((tmp_path / 'benchmark.json').read_text())
    assert result['device'] == 'cpu' and result['fps'] > 0 and len(result['fps_list']) == 1
    assert 'Done image [3  /3], fps: ' in done.stdout + done.stderr


def test_takes_a_checkpoint_of_the_config_and_refuses_another(workspace, tmp_path):
    torch.manual_seed(0)
    ours = tmp_path / 'vil.pth'
    torch.save(dict(state_dict=build_from_config(str(VIL)).state_dict()), ours)
    run_tool([TOOL, VIL, ours, *SHORT], cwd=workspace)
    message = fails_in_one_line([TOOL, STOCK, ours, *SHORT], cwd=workspace, work_dir=tmp_path)
    assert message.startswith(f"error: checkpoint '{ours}'")
    assert message.endswith('expected a checkpoint of this config')
