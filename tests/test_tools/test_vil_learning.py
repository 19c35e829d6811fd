"""The ViL RetinaNet demo learns: a short run of its config through the stock tools beats the
untrained model's box AP50 on the shapes data. The full demo run and its figures:
configs/vil/README.md."""
from .test_learning import AP50_MARGIN, DET_PIPELINES, assert_learned, before_and_after

DET_SMALL = """
_base_ = {base!r}
size = (96, 96)
""" + DET_PIPELINES + """loader = dict(num_workers=0, persistent_workers=False)
train_dataloader = dict(dataset=dict(pipeline=train_pipeline), **loader)
val_dataloader = dict(dataset=dict(pipeline=test_pipeline), **loader)
test_dataloader = val_dataloader
train_cfg = dict(max_iters={iters}, val_interval={iters})
param_scheduler = [dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=20)]
default_hooks = dict(logger=dict(interval=20))
randomness = dict(seed=0)
"""


def test_vil_retinanet_demo_learns(workspace, tmp_path, monkeypatch):
    """150 iterations of batch 8 at 96x96 from scratch: the Vision Longformer RetinaNet finds the
    shapes better than its untrained initialisation (which detects nothing above the score
    threshold). The classifier's loss breaks through between iterations 100 and 120; at 60 the
    scores stay below the threshold on some CPUs (no detection at all), so the check runs past
    it."""
    # two threads on shared cores spin in OpenMP (see test_smca_learning)
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    untrained, trained = before_and_after(
        workspace, tmp_path, DET_SMALL,
        'configs/vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py', 150, 'bbox_mAP_50',
    )
    assert_learned(untrained, trained, AP50_MARGIN)
