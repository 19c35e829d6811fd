"""Any backbone of the project in any stock config: ten mmdet 3.3 detector families and six mmseg
1.2 decode heads, read from the installed packages' ``.mim/configs`` with only the backbone swapped
(a small model of each, ``test_contract.CASES``) and the neck's or heads' ``in_channels`` taken from
its ``out_channels``, take a training step with a finite loss in which every backbone parameter gets
a gradient (the heads' parameters as with the stock backbone, the control), then predict, on 128 x
128 images.

The swap is the plug-in guide's rule (docs/user_guides/plug_in.md): a backbone with at least as many
stages of distinct strides as the stock backbone returns gives its last stages to the config's neck;
a single-scale one (PerViT, CastlingViT, DeiTRipple) or one with fewer stages (ESNet, CastlingLeViT
under mmseg's four-level heads) gives its last map to mmseg's ``MultiLevelNeck``, which rescales it
to the stock strides."""
import importlib
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

import mmvisattn  # noqa: F401
from mmvisattn.registry import models_of_scope

from ..test_models.test_backbones.test_contract import CASES

SIZE = 128
# DINO's two-stage query selection takes its 900 queries from the encoder's tokens: 340 at 128 x 128
SIZES = {'DINO': 256}
DETECTORS = {
    'Faster R-CNN': 'faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py',
    'Cascade R-CNN': 'cascade_rcnn/cascade-rcnn_r50_fpn_1x_coco.py',
    'Mask R-CNN': 'mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py',
    'RetinaNet': 'retinanet/retinanet_r50_fpn_1x_coco.py',
    'FCOS': 'fcos/fcos_r50-caffe_fpn_gn-head_1x_coco.py', 'ATSS': 'atss/atss_r50_fpn_1x_coco.py',
    'GFL': 'gfl/gfl_r50_fpn_1x_coco.py', 'DINO': 'dino/dino-4scale_r50_8xb2-12e_coco.py',
    'YOLOX': 'yolox/yolox_s_8xb8-300e_coco.py', 'RTMDet': 'rtmdet/rtmdet_tiny_8xb32-300e_coco.py',
}
SEGMENTORS = {'FCN': 'fcn/fcn_r50-d8_4xb2-40k_cityscapes-512x1024.py',
              'PSPNet': 'pspnet/pspnet_r50-d8_4xb2-40k_cityscapes-512x1024.py',
              'DeepLabV3+': 'deeplabv3plus/deeplabv3plus_r50-d8_4xb2-40k_cityscapes-512x1024.py',
              'UperNet': 'upernet/upernet_r50_4xb2-40k_cityscapes-512x1024.py',
              'SegFormer': 'segformer/segformer_mit-b0_8xb1-160k_cityscapes-1024x1024.py',
              'Mask2Former': 'mask2former/mask2former_r50_8xb2-90k_cityscapes-512x1024.py',}
CONFIGS = {**{name: ('mmdet', path) for name, path in DETECTORS.items()},
           **{name: ('mmseg', path) for name, path in SEGMENTORS.items()}}
STOCK = 'stock backbone'


def stock_config(config: str) -> Config:
    """The stock config, its weights (the backbone's ``init_cfg``; mmseg's segmentors hand
    ``model.pretrained`` to the backbone) and its random resizing of batches (YOLOX's, to 480-800)
    left out."""
    scope, path = CONFIGS[config]
    cfg = Config.fromfile(
        Path(importlib.import_module(scope).__file__).parent / '.mim/configs' / path
    )
    cfg.model.backbone.pop('init_cfg', None)
    cfg.model.pop('pretrained', None)
    cfg.model.data_preprocessor.pop('batch_augments', None)
    if scope == 'mmseg':
        cfg.model.data_preprocessor.size = (SIZE, SIZE)  # the segmentation configs' crop
    return cfg


def build(cfg: Config) -> torch.nn.Module:
    """The model as mmengine's Runner builds it: ``init_weights`` fills what the constructors leave
    uninitialised (DINO's ``level_embed`` is ``torch.Tensor(levels, dims)``, NaN or 1e38 at
    random)."""
    init_default_scope(cfg.default_scope)
    torch.manual_seed(0)
    model = models_of_scope(cfg.default_scope).build(cfg.model)
    model.init_weights()
    return model


def feature_strides(backbone: torch.nn.Module) -> List[int]:
    """The strides of the maps ``backbone`` returns."""
    backbone.eval()  # mmdet's ResNet.train returns None
    with torch.no_grad():
        outs = backbone(torch.zeros(1, 3, SIZE, SIZE))
    return [SIZE // out.shape[-1] for out in outs]


def swap_backbone(cfg: Config, name: str, strides: List[int]) -> None:
    """The plug-in guide's rule (module docstring) for the backbone ``name`` where the stock one
    returned maps of ``strides``."""
    options, stages = CASES[name]
    probe = models_of_scope(cfg.default_scope).build(
        dict(type=name, **options, out_indices=tuple(range(stages)))
    )
    wanted = len(strides)
    if stages >= wanted and len(set(probe.out_strides[-wanted:])) == wanted:
        out_indices, channels, pyramid = (tuple(range(stages))[-wanted:],
                                          probe.out_channels[-wanted:], [])
    else:
        last = probe.out_strides[-1]
        out_indices, channels = (stages - 1,), [256] * wanted
        pyramid = [dict(type='mmseg.MultiLevelNeck', in_channels=[probe.out_channels[-1]],
                        out_channels=256, scales=[last / stride for stride in strides])]
    cfg.model.backbone = dict(type=name, **options, out_indices=out_indices)
    neck = cfg.model.get('neck')
    if neck is not None:
        neck.in_channels = channels
        cfg.model.neck = pyramid + [neck] if pyramid else neck
        return
    cfg.model.neck = pyramid[0] if pyramid else None
    heads = cfg.model.get('auxiliary_head') or []
    for head in [cfg.model.get('decode_head')] + (heads if isinstance(heads, list) else [heads]):
        index = head.get('in_index', list(range(wanted)))
        head.in_channels = (
            [channels[i] for i in index] if isinstance(index, (list, tuple)) else channels[index]
        )
        if 'c1_in_channels' in head:
            head.c1_in_channels = channels[0]


def inputs(config: str) -> Dict:
    """Two images with three boxes (and masks) each, or a label map of Cityscapes' 19 classes."""
    scope, size = CONFIGS[config][0], SIZES.get(config, SIZE)
    if scope == 'mmdet':
        from mmdet.testing import demo_mm_inputs
        return demo_mm_inputs(2, [(3, size, size)] * 2, num_items=[3, 3], num_classes=10,
                              with_mask=config == 'Mask R-CNN')
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    samples = []
    for _ in range(2):
        sample = SegDataSample(metainfo=dict(img_shape=(SIZE, SIZE), ori_shape=(SIZE, SIZE)))
        sample.gt_sem_seg = PixelData(data=torch.randint(0, 19, (1, SIZE, SIZE)))
        samples.append(sample)
    return dict(inputs=[torch.randint(0, 256, (3, SIZE, SIZE),
                                      dtype=torch.uint8) for _ in range(2)],
                data_samples=samples)


def step_then_predict(model: torch.nn.Module, config: str) -> Dict[str, List[str]]:
    """Train one step, predict; the trainable parameters left without a gradient, by part of the
    model."""
    packed = inputs(config)
    model.train()
    losses = model(**model.data_preprocessor(packed, True), mode='loss')
    loss = model.parse_losses(losses)[0]
    assert torch.isfinite(loss), f'{config}: loss {loss.item()}'
    loss.backward()
    unused: Dict[str, List[str]] = {}
    for name, param in model.named_parameters():
        if param.requires_grad and param.grad is None:
            unused.setdefault(name.split('.')[0], []).append(name)
    model.eval()
    with torch.no_grad():
        predictions = model(**model.data_preprocessor(packed, False), mode='predict')
    assert len(predictions) == 2
    return unused


@pytest.fixture(scope='module')
def controls() -> Dict[str, Tuple[List[int], Dict[str, List[str]]]]:
    return {}


def control(config: str, controls) -> Tuple[List[int], Dict[str, List[str]]]:
    """The stock model's map strides and its parameters without a gradient (each config once per
    worker)."""
    if config not in controls:
        model = build(stock_config(config))
        controls[config] = feature_strides(model.backbone), step_then_predict(model, config)
    return controls[config]


@pytest.mark.parametrize('backbone', [STOCK, *CASES])
@pytest.mark.parametrize('config', CONFIGS)
def test_a_backbone_trains_and_predicts_in_a_stock_config(config, backbone, controls):
    strides, stock_unused = control(config, controls)
    if backbone == STOCK:
        assert 'backbone' not in stock_unused, stock_unused
        return
    cfg = stock_config(config)
    swap_backbone(cfg, backbone, strides)
    unused = step_then_predict(build(cfg), config)
    assert 'backbone' not in unused, unused['backbone'][:5]
    heads = {part: names for part, names in unused.items() if part != 'neck'}
    assert heads == {part: names for part, names in stock_unused.items() if part != 'neck'}
