"""The model pairs of ``benchmark_models.py``: each project model beside the stock one it replaces,
and one training step on synthetic targets through ``model.loss``."""
from dataclasses import dataclass
from typing import Dict, List, Tuple

SWIN_RETINANET = 'mmdet::swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py'
SWIN_MASK_RCNN = 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'
SWIN_UPERNET = 'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
COCO_SIZE = (800, 1344)  # 1333 on the long side, padded to the detectors' multiple of 32
BOXES_PER_IMAGE = 4


@dataclass(frozen=True)
class ModelPair:
    """A project config (``deploy``: its model after ``switch_to_deploy()``, the train-only branches
    removed) beside its stock counterpart, at the input size it trains at."""
    key: str
    family: str
    project: str
    stock: str
    stock_label: str
    train_size: Tuple[int, int]
    deploy: bool = False
    stride: int = 32


def _pairs() -> List[ModelPair]:
    pairs = []
    for arch in ('b0', 'b2'):
        pairs.append(ModelPair(
            f'segformer-{arch}-rwgka', 'segformer_rwgka',
            f'configs/segformer_rwgka/segformer_mit-{arch}-rwgka_8xb1-160k_cityscapes-1024x1024.py',
            f'mmseg::segformer/segformer_mit-{arch}_8xb1-160k_cityscapes-1024x1024.py',
            f'SegFormer-{arch.upper()}', (1024, 1024)))
    for head, stock in (('retinanet', SWIN_RETINANET), ('mask-rcnn', SWIN_MASK_RCNN)):
        for arch in ('tiny', 'small'):
            pairs.append(ModelPair(f'{head}-vil-{arch}', 'vil',
                                   f'configs/vil/{head}_vil-{arch}_fpn_1x_coco.py',
                                   stock, f'Swin-T {head}', COCO_SIZE))
    castling = 'configs/castling/mask2former_castling-vit-b_8xb2-160k_ade20k-512x512.py'
    softmax = 'configs/castling/mask2former_vit-b_8xb2-160k_ade20k-512x512.py'
    pairs.append(ModelPair('mask2former-castling-vit-b', 'castling', castling, softmax,
                           'ViT-B (softmax)', (512, 512)))
    pairs.append(ModelPair('mask2former-castling-vit-b-deploy', 'castling', castling, softmax,
                           'ViT-B (softmax)', (512, 512), deploy=True))
    for variant in ('ripple', 'la'):
        pairs.append(ModelPair(f'smca-{variant}', 'smca',
                               f'configs/smca/smca-{variant}_r50_8xb2-50e_coco.py',
                               'configs/smca/smca_r50_8xb2-50e_coco.py', 'SMCA', COCO_SIZE))
    for arch, side in (('s', 320), ('l', 640)):
        pairs.append(ModelPair(f'picodet-{arch}-castling', 'picodet',
                               f'configs/picodet/picodet-{arch}_castling_8xb32-300e_coco-{side}.py',
                               f'configs/picodet/picodet-{arch}_esnet_8xb32-300e_coco-{side}.py',
                               f'PicoDet-{arch.upper()} ESNet', (side, side)))
    for arch in ('t', 's'):
        pairs.append(ModelPair(f'upernet-pervit-{arch}', 'pervit',
                               f'configs/pervit/upernet_pervit-{arch}_8xb2-160k_ade20k-512x512.py',
                               SWIN_UPERNET, 'Swin-T UperNet', (512, 512)))
    for arch in ('t', 's'):
        pairs.append(ModelPair(f'mask-rcnn-pervit-{arch}', 'pervit',
                               f'configs/pervit/mask-rcnn_pervit-{arch}_simplefpn_1x_coco.py',
                               SWIN_MASK_RCNN, 'Swin-T mask-rcnn', COCO_SIZE))
    return pairs


PAIRS: Dict[str, ModelPair] = {pair.key: pair for pair in _pairs()}
FAMILIES = tuple(dict.fromkeys(pair.family for pair in PAIRS.values()))


def build_training_model(config: str, deploy: bool = False):
    """The model of a project or stock (``mmdet::`` / ``mmseg::``) config in training mode, random
    weights; ``deploy`` switches it to its deploy form first."""
    from lab.bench.inference import build_model
    from mmvisattn.deploy import switch_to_deploy
    model = build_model(config)
    if deploy:
        switch_to_deploy(model)
    return model.train()


def model_scope(model) -> str:
    """'mmseg' for a segmentor, 'mmdet' for a detector."""
    return 'mmseg' if hasattr(model, 'decode_head') else 'mmdet'


def _num_classes(model) -> int:
    for module in model.modules():
        if isinstance(getattr(module, 'num_classes', None), int):
            return module.num_classes
    raise ValueError(f'{type(model).__name__} has no head with num_classes')


def _rectangles(generator, count: int, height: int, width: int):
    """``count`` boxes ``x1 y1 x2 y2`` covering 10-40 % of each side, inside the image."""
    import torch
    sizes = (0.1 + 0.3 * torch.rand(count, 2, generator=generator)) * torch.tensor([width, height])
    corners = torch.rand(count, 2, generator=generator) * (torch.tensor([width, height]) - sizes)
    return torch.cat([corners, corners + sizes], dim=1).floor()


def synthetic_samples(model, batch: int, height: int, width: int) -> list:
    """Data samples with targets for ``batch`` images of ``height x width``: boxes (and their masks
    where the model has a mask head) for a detector, a label map of rectangles for a segmentor."""
    import numpy as np
    import torch
    from mmengine.structures import InstanceData, PixelData
    generator = torch.Generator().manual_seed(0)
    classes = _num_classes(model)
    meta = dict(img_shape=(height, width), ori_shape=(height, width), pad_shape=(height, width),
                batch_input_shape=(height, width), scale_factor=(1.0, 1.0), flip=False)
    samples = []
    for _ in range(batch):
        boxes = _rectangles(generator, BOXES_PER_IMAGE, height, width)
        labels = torch.randint(classes, (BOXES_PER_IMAGE,), generator=generator)
        if model_scope(model) == 'mmseg':
            from mmseg.structures import SegDataSample
            label_map = torch.zeros(1, height, width, dtype=torch.long)
            for (x1, y1, x2, y2), label in zip(boxes.long().tolist(), labels.tolist()):
                label_map[:, y1:y2, x1:x2] = label
            samples.append(SegDataSample(metainfo=meta, gt_sem_seg=PixelData(data=label_map)))
            continue
        from mmdet.structures import DetDataSample
        from mmdet.structures.mask import BitmapMasks
        instances = InstanceData(bboxes=boxes, labels=labels)
        if getattr(getattr(model, 'roi_head', None), 'with_mask', False):
            masks = np.zeros((BOXES_PER_IMAGE, height, width), dtype=np.uint8)
            for mask, (x1, y1, x2, y2) in zip(masks, boxes.long().tolist()):
                mask[y1:y2, x1:x2] = 1
            instances.masks = BitmapMasks(masks, height, width)
        samples.append(DetDataSample(metainfo=meta, gt_instances=instances))
    return samples


class TrainingStep:
    """One optimiser-free training step of ``model`` on a fixed synthetic batch: ``step()`` clears
    the gradients, computes the loss and runs the backward; ``step.loss()`` and
    ``step.backward(loss)`` are its halves."""

    def __init__(self, model, batch: int, height: int, width: int, device: str = 'cpu'):
        import torch
        self.model = model
        self.images = torch.randn(batch, 3, height, width,
                                  generator=torch.Generator().manual_seed(1)).to(device)
        self.samples = [
            sample.to(device) for sample in synthetic_samples(model, batch, height, width)
        ]

    def loss(self):
        self.model.zero_grad(set_to_none=True)
        return self.model.parse_losses(self.model.loss(self.images, self.samples))[0]

    def backward(self, loss) -> None:
        loss.backward()

    def __call__(self) -> None:
        self.backward(self.loss())
