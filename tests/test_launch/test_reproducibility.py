"""The same config gives the same numbers: each family's demo, run twice through ``tools/train.py``
with ``randomness=dict(seed=0, deterministic=True)`` (the demos' seed; mmengine's deterministic
switch, which calls ``torch.use_deterministic_algorithms(True)``), logs the same loss at every
iteration and writes bit-identical weights and optimizer state, on the CPU. The demos' random draws
(augmentation, drop-path, the samplers' order, the dataloader workers) all run; three iterations of
batch 2, no validation."""
from typing import Dict

import pytest
import torch

import mmvisattn  # noqa: F401  (lets torch.load read Runner checkpoints)

from ..conftest import REPO, run_tool
from .conftest import logged_losses

ITERS = 3
OPTIONS = [f'train_cfg.max_iters={ITERS}', 'train_dataloader.batch_size=2',
           'default_hooks.logger.interval=1',
           f'default_hooks.checkpoint.interval={ITERS}', 'val_cfg=None', 'val_dataloader=None',
           'val_evaluator=None', 'randomness.deterministic=True']
FAMILY_DEMOS = {
    'SMCA-Ripple': ('smca/smca_r18_1xb8-600i_shapes-coco-128.py',
                    ['model.encoder.layer_cfg.attn_cfg.type=RippleAttention']),
    'ViL': ('vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py', []),
    'Segformer-RWGKA': ('segformer_rwgka/segformer_mit-b0-rwgka_1xb8-600i_shapes-cityscapes-128.py',
                        []),
    'Castling': ('castling/segformer-head_castling-levit-s_1xb8-600i_shapes-cityscapes-128.py', []),
    'PicoDet-Castling': ('picodet/picodet-s_castling_1xb16-600i_shapes-coco-128.py', []),
    'PerViT': ('pervit/mask-rcnn_pervit-t_simplefpn_1xb8-600i_shapes-coco-128.py', []),
}


def tensors(tree, prefix: str = '') -> Dict[str, torch.Tensor]:
    """Every tensor of a nested checkpoint entry, by its path."""
    if isinstance(tree, torch.Tensor):
        return {prefix: tree}
    items = (
        tree.items()
        if isinstance(tree, dict)
        else enumerate(tree)
        if isinstance(tree, (list, tuple))
        else ()
    )
    return {
        path: t for key, value in items for path, t in tensors(value, f'{prefix}/{key}').items()
    }


@pytest.mark.parametrize('family', FAMILY_DEMOS)
def test_a_demo_trains_bit_identically_twice_under_deterministic_mode(workspace, tmp_path, family):
    config, options = FAMILY_DEMOS[family]
    runs = [tmp_path / name for name in ('first', 'second')]
    for work_dir in runs:
        run_tool(['tools/train.py', REPO / 'configs' / config, '--work-dir', work_dir,
                  '--cfg-options', *OPTIONS, *options], cwd=workspace)
    first, second = (logged_losses(work_dir) for work_dir in runs)
    assert sorted(first) == list(range(1, ITERS + 1)) and first == second, (first, second)
    for entry in ('state_dict', 'optimizer'):
        a, b = (tensors(torch.load(work_dir / f'iter_{ITERS}.pth')[entry]) for work_dir in runs)
        assert a.keys() == b.keys() and a, entry
        differ = [name for name in a if not torch.equal(a[name], b[name])]
        assert not differ, f'{family}: {entry} differs in {differ[:5]}'
