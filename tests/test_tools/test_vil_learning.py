"""The ViL RetinaNet demo learns: a short run of its config through the stock tools beats the
untrained model's bbox mAP on the shapes data. The full demo run and its figures: configs/vil/README.md."""
import re

from ..conftest import REPO, run_tool
from .test_learning import untrained_checkpoint

DET_SMALL = """
_base_ = {base!r}
size = (96, 96)
train_pipeline = [dict(type='LoadImageFromFile'), dict(type='LoadAnnotations', with_bbox=True),
                  dict(type='Resize', scale=size, keep_ratio=True), dict(type='RandomFlip', prob=0.5),
                  dict(type='PackDetInputs')]
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='Resize', scale=size, keep_ratio=True),
                 dict(type='LoadAnnotations', with_bbox=True),
                 dict(type='PackDetInputs', meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor'))]
loader = dict(num_workers=0, persistent_workers=False)
train_dataloader = dict(dataset=dict(pipeline=train_pipeline), **loader)
val_dataloader = dict(dataset=dict(pipeline=test_pipeline), **loader)
test_dataloader = val_dataloader
train_cfg = dict(max_iters={iters}, val_interval={iters})
param_scheduler = [dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=20)]
default_hooks = dict(logger=dict(interval=20))
randomness = dict(seed=0)
"""


def bbox_map(output: str) -> float:
    """The last bbox mAP printed; 0 when the model detected nothing at all (mmdet then prints no mAP)."""
    found = re.findall(r'coco/bbox_mAP: ([0-9.]+)', output)
    if found:
        return float(found[-1])
    assert 'The testing results of the whole dataset is empty' in output, output[-3000:]
    return 0.0


def test_vil_retinanet_demo_learns(workspace, tmp_path, monkeypatch):
    """160 iterations of batch 8 at 96x96 from scratch: the Vision Longformer RetinaNet finds the
    shapes better than its untrained initialisation (which detects nothing above the score
    threshold; after 120 iterations bbox mAP was 0.004, AP50 0.017)."""
    monkeypatch.setenv('OMP_NUM_THREADS', '1')  # two threads on shared cores spin in OpenMP (see test_smca_learning)
    config = tmp_path / 'small.py'
    base = REPO / 'configs/vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py'
    config.write_text(DET_SMALL.format(base=str(base), iters=160))
    untrained_checkpoint(config, tmp_path / 'untrained.pth')
    before = run_tool(['tools/test.py', config, tmp_path / 'untrained.pth', '--work-dir', tmp_path / 'before'],
                      cwd=workspace)
    # about a minute on two idle cores; the timeout leaves room for a machine shared with other jobs
    trained = run_tool(['tools/train.py', config, '--work-dir', tmp_path / 'train'], cwd=workspace, timeout=1800)
    untrained_map = bbox_map(before.stdout + before.stderr)
    trained_map = bbox_map(trained.stdout + trained.stderr)
    assert trained_map > untrained_map, (untrained_map, trained_map)
