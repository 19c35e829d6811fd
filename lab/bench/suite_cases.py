"""The cases of ``benchmark_suite.py``: each op against its peers (SDPA, mmseg's SRA, the official
modules) on a few grids, and whole models at one size."""
from dataclasses import dataclass
from typing import Dict, Tuple

SDPA = 'SoftmaxAttention'
SRA = 'mmseg.models.backbones.mit.EfficientMultiheadAttention:sr_ratio=8'


@dataclass
class OpCase:
    """One op of the project against its peers: ``ours`` and ``peers`` map a column label to a
    module spec (``benchmark_attention.py``'s ``NAME:key=value`` or ``official:NAME``)."""
    key: str
    title: str
    ours: Dict[str, str]
    peers: Dict[str, str]
    grids: Tuple[int, ...]
    dims: int = 96
    heads: int = 3
    batch: int = 2
    memory_peers: Tuple[str, ...] = ('SDPA',)


OP_CASES = (
    OpCase(
        'vil', 'ViL (w 7, one global token)',
        {
            'ViL': 'LongformerAttention:window=7,num_extra_tokens=1',
            'ViL, official settings': 'LongformerAttention:window=7,num_extra_tokens=1,'
            'share_global_weights=False,qkv_bias=False',
        },
        {'SDPA': SDPA, 'official': 'official:vil'}, (28, 56, 112),
        memory_peers=('SDPA', 'official'),
    ),
    OpCase(
        'ripple', 'Ripple (R 4 and 8)',
        {'Ripple R4': 'RippleAttention:r_max=4', 'Ripple R8': 'RippleAttention:r_max=8'},
        {'SDPA': SDPA}, (32, 64, 128),
    ),
    OpCase(
        'rwgka', 'RWGKA (64 anchors)', {'RWGKA': 'RWGKAttention'}, {'SDPA': SDPA}, (28, 56, 112)
    ),
    OpCase(
        'rwgka-mit-b0', 'RWGKA, MiT-B0 stage 1 (32 dims, one head, batch 1)',
        {'RWGKA': 'RWGKAttention'}, {'SRA r8 (mmseg)': SRA}, (64, 128, 256), dims=32, heads=1,
        batch=1, memory_peers=('SRA r8 (mmseg)',),
    ),
    OpCase(
        'castling', 'Castling (linear-angular, deploy form)',
        {'Castling': 'LinearAngularAttention'}, {'SDPA': SDPA, 'official': 'official:castling'},
        (28, 56, 112),
    ),
    OpCase(
        'pervit',
        'PerViT (peripheral; position MLP every call, as in training, and Phi_p frozen, as cached '
        'in eval)',
        {
            'PerViT': 'PeripheralAttention',
            'PerViT, Phi_p frozen': 'PeripheralAttention:freeze_position=True',
        },
        {'SDPA': SDPA, 'official': 'official:pervit'}, (14, 28, 56),
    ),
)


@dataclass
class ModelGroup:
    """Whole models on one input size; ratios against the first model."""
    key: str
    title: str
    configs: Dict[str, str]
    shape: Tuple[int, int]
    rounds: int = 5


MODEL_GROUPS = (
    ModelGroup(
        'retinanet', 'RetinaNet',
        {
            'R18': 'mmdet::retinanet/retinanet_r18_fpn_1x_coco.py',
            'PVT-T': 'mmdet::pvt/retinanet_pvt-t_fpn_1x_coco.py',
            'Swin-T': 'mmdet::swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py',
            'ViL-T': 'configs/vil/retinanet_vil-tiny_fpn_1x_coco.py',
        },
        (800, 1344),
    ),
    ModelGroup(
        'segformer', 'SegFormer',
        {
            'SegFormer-B0': 'mmseg::segformer/segformer_mit-b0_8xb1-160k_cityscapes-1024x1024.py',
            'SegFormer-B0-RWGKA':
                'configs/segformer_rwgka/segformer_mit-b0-rwgka_8xb1-160k_cityscapes-1024x1024.py',
        },
        (1024, 2048), rounds=3,
    ),
)
