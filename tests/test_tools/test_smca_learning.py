"""The SMCA demo learns through the stock tools: a shrunken demo (64x64 images, half-width ResNet-18
stages, 200 iterations) beats the untrained model's COCO box AP50 on the shapes data."""
from .test_learning import AP50_MARGIN, DET_PIPELINES, assert_learned, before_and_after

DEMO = 'configs/smca/smca_r18_1xb8-600i_shapes-coco-128.py'
SMALL = """
_base_ = {base!r}
size = (64, 64)
""" + DET_PIPELINES + """train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
model = dict(backbone=dict(base_channels=32), neck=dict(in_channels=[64]))
train_cfg = dict(max_iters={iters}, val_interval={iters})
param_scheduler = [dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=20)]
randomness = dict(seed=0)
"""


def test_smca_demo_learns(workspace, tmp_path, monkeypatch):
    """One torch thread per tool: with 2 threads on a shared 2-core machine OpenMP's spinning made
    each iteration 30x slower here (measured: 12 s against 0.4 s)."""
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    untrained, trained = before_and_after(workspace, tmp_path, SMALL, DEMO, 200, 'coco/bbox_mAP_50')
    assert_learned(untrained, trained, AP50_MARGIN)
