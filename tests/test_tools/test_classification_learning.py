"""The classification demos learn through the stock tools (mmpretrain scope): 300 iterations on the
shapes data's classification split beat the untrained model and chance. The ViL one runs in
``make test`` and its checkpoint then starts the ViL RetinaNet demo (the hand-off of ImageNet
weights, end to end); the other families' run in ``make test-slow``. Their figures: each family's
README."""
import re
from pathlib import Path

import pytest
import torch

from ..conftest import REPO, run_tool
from .test_learning import assert_learned, before_and_after

CLS_SMALL = """
_base_ = {base!r}
loader = dict(num_workers=0, persistent_workers=False)
train_dataloader = dict(**loader)
val_dataloader = dict(**loader)
test_dataloader = val_dataloader
train_cfg = dict(max_iters={iters}, val_interval={iters})
default_hooks = dict(checkpoint=dict(interval={iters}))
randomness = dict(seed=0)
"""
CHANCE = 100 / 3  # three balanced classes
MARGIN = 5.0  # top-1 accuracy points
ITERS = 300
VIL_DEMO = 'configs/vil/vil-demo_1xb32-300i_shapes-imagenet-64.py'
VIL_DETECTOR = 'configs/vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py'


def test_vil_classification_demo_learns_then_starts_the_detection_demo(
    workspace, tmp_path, monkeypatch
):
    # two threads on shared cores spin in OpenMP (see test_smca_learning)
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    untrained, trained = before_and_after(workspace, tmp_path, CLS_SMALL, VIL_DEMO, ITERS,
                                          'accuracy/top1')
    assert_learned(untrained, trained, MARGIN, CHANCE)
    checkpoint = tmp_path / 'train' / f'iter_{ITERS}.pth'
    detector = tmp_path / 'detector.py'
    pretrained = dict(type='Pretrained', checkpoint=str(checkpoint))
    detector.write_text(f"_base_ = {str(REPO / VIL_DETECTOR)!r}\n"
                        f"model = dict(backbone=dict(init_cfg={pretrained!r}))\n"
                        "train_cfg = dict(max_iters=2, val_interval=2)\n"
                        # the steps leave the weights as loaded
                        "optim_wrapper = dict(optimizer=dict(lr=0.0))\n"
                        "train_dataloader = dict(num_workers=0, persistent_workers=False)\n"
                        "val_dataloader = dict(num_workers=0, persistent_workers=False)\n")
    done = run_tool(['tools/train.py', detector, '--work-dir', tmp_path / 'detector'],
                    cwd=workspace)
    line = next(line for line in (done.stdout + done.stderr).splitlines() if 'ViL: loaded' in line)
    assert re.search(r'as ViL \(this project\), from an mmpretrain classifier: (\d+) of \1 '
                     r'tensors; newly '
                     r'initialised \(0\): none; dropped \(7\): head.fc.bias, head.fc.weight, '
                     r'norm.bias, norm.weight, '
                     r'stages.3.blocks.0.attn.g2g_relative_position_bias, '
                     r'stages.3.blocks.0.attn.g2l_relative_position_bias, stages.3.cls_token$',
                     line), line
    classifier = torch.load(checkpoint)['state_dict']
    detector = torch.load(tmp_path / 'detector' / 'iter_2.pth')['state_dict']
    handed = {key: value for key, value in classifier.items() if key in detector}
    assert len(handed) == int(re.search(r'(\d+) of \1 tensors', line).group(1))
    assert all(
        key.startswith('backbone.') and torch.equal(detector[key], value)
        for key, value in handed.items()
    )


SLOW_DEMOS = sorted(
    path
    for path in (REPO / 'configs').rglob('*-demo_1xb32-300i_shapes-imagenet-64.py')
    if str(path.relative_to(REPO)) != VIL_DEMO
)


@pytest.mark.slow
@pytest.mark.parametrize('config', SLOW_DEMOS, ids=lambda path: path.parent.name)
def test_classification_demo_learns(workspace, tmp_path, config: Path):
    untrained, trained = before_and_after(workspace, tmp_path, CLS_SMALL,
                                          str(config.relative_to(REPO)), ITERS, 'accuracy/top1')
    assert_learned(untrained, trained, MARGIN, CHANCE)
