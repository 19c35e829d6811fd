"""PicoHead, the detection head of PP-PicoDet v1 (arXiv:2111.00902, §3.3-3.4; PaddleDetection
release/2.6).

mmdet 3 has the pieces but not the head: ``GFLHead`` shares one tower over all levels and assigns
with ATSS, where PicoDet gives each level its own tower of depthwise-separable 5x5 convolutions, one
point prior per cell and SimOTA. This class keeps GFLHead's integral, DFL and prediction code and
replaces its layers and loss.
"""
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmcv.cnn import DepthwiseSeparableConvModule
from mmdet.models.dense_heads import GFLHead
from mmdet.models.utils import multi_apply
from mmdet.structures.bbox import bbox_overlaps
from mmdet.utils import InstanceList, OptInstanceList, reduce_mean
from mmengine.model import bias_init_with_prob, normal_init
from mmengine.structures import InstanceData
from torch import Tensor

from mmvisattn.registry import register_model


@register_model
class PicoHead(GFLHead):
    """Per-level depthwise-separable towers, one 1x1 prediction conv per level giving
    ``num_classes + 4 * (reg_max + 1)`` channels, VFL + GIoU + DFL losses with SimOTA assignment.

    Args:
        num_classes: Object classes.
        in_channels: Channels of every neck level.
        feat_channels: Width of the towers (PicoDet: ``in_channels``).
        stacked_convs: Depthwise-separable convolutions per tower (2 for s, 4 for m and l).
        kernel_size: Their depthwise kernel.
        strides: Strides of the levels (PicoDet v1: 8, 16, 32, 64).
        reg_max: Largest distance bin of the integral regression, in strides.
        norm_cfg / act_cfg: Tower norms and activations (BatchNorm, hard swish).
        loss_cls / loss_bbox / loss_dfl: VFL (IoU-weighted), GIoU and DFL.
        train_cfg: Needs ``assigner`` (SimOTA); test_cfg: ``nms_pre``, ``score_thr``, ``nms``,
            ``max_per_img``.
    """

    def __init__(self, num_classes: int, in_channels: int, feat_channels: Optional[int] = None,
                 stacked_convs: int = 2, kernel_size: int = 5,
                 strides: Sequence[int] = (8, 16, 32, 64),
                 reg_max: int = 7, norm_cfg: dict = dict(type='BN'),  # noqa: B006
                 act_cfg: dict = dict(type='HSwish'),  # noqa: B006
                 loss_cls: dict = dict(type='VarifocalLoss', use_sigmoid=True, alpha=0.75,  # noqa: B006
                                       gamma=2.0, iou_weighted=True, loss_weight=1.0),
                 loss_bbox: dict = dict(type='GIoULoss', loss_weight=2.0),  # noqa: B006
                 loss_dfl: dict = dict(type='DistributionFocalLoss', loss_weight=0.25),  # noqa: B006
                 train_cfg: Optional[dict] = None, test_cfg: Optional[dict] = None,
                 init_cfg: Optional[dict] = None) -> None:
        self.kernel_size = kernel_size
        self.act_cfg = act_cfg
        super().__init__(num_classes, in_channels, stacked_convs=stacked_convs, norm_cfg=norm_cfg,
                         feat_channels=feat_channels or in_channels, reg_max=reg_max,
                         anchor_generator=dict(type='MlvlPointGenerator', strides=strides,
                                               offset=0.5),
                         loss_cls=loss_cls, loss_bbox=loss_bbox, loss_dfl=loss_dfl,
                         reg_decoded_bbox=True,
                         train_cfg=train_cfg, test_cfg=test_cfg, init_cfg=init_cfg)

    def _init_layers(self) -> None:
        def tower() -> nn.Sequential:
            return nn.Sequential(*(DepthwiseSeparableConvModule(
                self.in_channels if i == 0 else self.feat_channels, self.feat_channels,
                self.kernel_size,
                padding=self.kernel_size // 2, norm_cfg=self.norm_cfg, act_cfg=self.act_cfg)
                for i in range(self.stacked_convs)))

        num_levels = len(self.prior_generator.strides)
        self.towers = nn.ModuleList(tower() for _ in range(num_levels))
        self.predictors = nn.ModuleList(
            nn.Conv2d(self.feat_channels, self.cls_out_channels + 4 * (self.reg_max + 1), 1)
            for _ in range(num_levels))

    def init_weights(self) -> None:
        super().init_weights()
        for predictor in self.predictors:
            normal_init(predictor, std=0.01)
            predictor.bias.data[:self.cls_out_channels] = bias_init_with_prob(0.01)

    def forward(self, x: Tuple[Tensor, ...]) -> Tuple[List[Tensor], List[Tensor]]:
        """Per level: ``(B, classes, H, W)`` class and ``(B, 4 (reg_max + 1), H, W)`` bin logits."""
        if len(x) != len(self.towers):
            raise ValueError(f'PicoHead: got {len(x)} feature levels; expected {len(self.towers)} '
                             f'(strides {[s[0] for s in self.prior_generator.strides]})')
        outputs = [predictor(tower(feat)) for feat, tower,
                   predictor in zip(x, self.towers, self.predictors)]
        return ([out[:, :self.cls_out_channels] for out in outputs],
                [out[:, self.cls_out_channels:] for out in outputs])

    def anchor_center(self, anchors: Tensor) -> Tensor:
        """The priors are points already (GFLHead's prediction code calls this on its anchors)."""
        return anchors[..., :2]

    def loss_by_feat(self, cls_scores: List[Tensor], bbox_preds: List[Tensor],
                     batch_gt_instances: InstanceList, batch_img_metas: List[dict],
                     batch_gt_instances_ignore: OptInstanceList = None) -> dict:
        """VFL over all priors, GIoU and DFL over the positives weighted by their detached top
        class score (PP-PicoDet's recipe), with SimOTA deciding the positives per image."""
        num_images = len(batch_img_metas)
        priors = torch.cat(self.prior_generator.grid_priors(
            [score.shape[-2:] for score in cls_scores], dtype=cls_scores[0].dtype,
            device=cls_scores[0].device, with_stride=True))
        logits = torch.cat([s.permute(0, 2, 3, 1).reshape(num_images, -1, self.cls_out_channels)
                            for s in cls_scores], dim=1)
        bins = torch.cat([b.permute(0, 2, 3, 1).reshape(num_images, -1, 4 * (self.reg_max + 1))
                          for b in bbox_preds], dim=1)
        distances = self.integral(bins).view(num_images, -1, 4) * priors[:, 2:3]
        boxes = self.bbox_coder.decode(priors[None, :, :2].expand(num_images, -1, -1), distances)
        if batch_gt_instances_ignore is None:
            batch_gt_instances_ignore = [None] * num_images

        cls_targets, image_pos_inds, image_gt_boxes = multi_apply(
            self._targets_single, logits.detach(), boxes.detach(), batch_gt_instances,
            batch_gt_instances_ignore, priors=priors)
        cls_targets = torch.cat(cls_targets)
        pos_inds = torch.cat([inds + i * priors.size(0) for i, inds in enumerate(image_pos_inds)])
        pos_gt_boxes = torch.cat(image_gt_boxes)

        logits, bins, boxes = logits.flatten(0, 1), bins.flatten(0, 1), boxes.flatten(0, 1)
        num_pos = reduce_mean(logits.new_tensor(float(pos_inds.numel()))).clamp(min=1.0)
        loss_cls = self.loss_cls(logits, cls_targets, avg_factor=num_pos)
        if pos_inds.numel() == 0:
            zero = bins.sum() * 0
            return dict(loss_cls=loss_cls, loss_bbox=zero, loss_dfl=zero)

        weights = logits[pos_inds].detach().sigmoid().max(dim=1).values
        weight_sum = reduce_mean(weights.sum()).clamp(min=1e-6)
        loss_bbox = self.loss_bbox(boxes[pos_inds], pos_gt_boxes, weight=weights,
                                   avg_factor=weight_sum)
        pos_priors = priors[pos_inds % priors.size(0)]  # the batch shares one prior table
        pos_strides = pos_priors[:, 2:3]
        pos_centres = pos_priors[:, :2] / pos_strides
        target_bins = self.bbox_coder.encode(pos_centres, pos_gt_boxes / pos_strides, self.reg_max)
        loss_dfl = self.loss_dfl(bins[pos_inds].reshape(-1, self.reg_max + 1),
                                 target_bins.reshape(-1),
                                 weight=weights.repeat_interleave(4), avg_factor=4.0 * weight_sum)
        return dict(loss_cls=loss_cls, loss_bbox=loss_bbox, loss_dfl=loss_dfl)

    def _targets_single(self, logits: Tensor, boxes: Tensor, gt_instances: InstanceData,
                        gt_instances_ignore: Optional[InstanceData],
                        priors: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """One image: VFL targets (IoU of the predicted box with its ground truth at the class),
        positive prior indices and their ground-truth boxes."""
        predictions = InstanceData(priors=priors, scores=logits.sigmoid(), bboxes=boxes)
        assigned = self.assigner.assign(predictions, gt_instances, gt_instances_ignore)
        sampled = self.sampler.sample(assigned, predictions, gt_instances)
        pos_inds = sampled.pos_inds
        # IoUs near 1 lose digits in half
        cls_targets = logits.new_zeros(logits.shape, dtype=torch.float32)
        ious = bbox_overlaps(boxes[pos_inds], sampled.pos_gt_bboxes,
                             is_aligned=True).clamp(min=1e-6)
        cls_targets[pos_inds, sampled.pos_gt_labels] = ious
        return cls_targets, pos_inds, sampled.pos_gt_bboxes
