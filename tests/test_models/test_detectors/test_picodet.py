"""PicoDet v1 in mmdet 3 (ESNet, CSP-PAN, PicoHead) and its castling LeViT backbone: sizes and
MACs against the PaddleDetection zoo, shapes at odd input sizes, the loss and the prediction path,
and one-line errors."""
import pytest
import torch
from mmdet.registry import MODELS
from mmengine.config import Config, ConfigDict
from mmengine.registry import init_default_scope
from mmengine.structures import InstanceData

import mmvisattn  # noqa: F401
from mmvisattn.models.backbones.esnet import channel_shuffle, make_divisible
from mmvisattn.utils.complexity import count_flops

from ...conftest import REPO

ZOO = {  # PaddleDetection release/2.6 model zoo: params (M) and GFLOPs (2 x MACs) at 320
    's': (0.99, 0.73),
    'm': (2.15, 1.48),
    'l': (3.30, 2.23),
}


def build_detector(config: str):
    cfg = Config.fromfile(REPO / 'configs/picodet' / config)
    init_default_scope('mmdet')
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model


def size_in_millions(model) -> float:
    return sum(p.numel() for p in model.parameters()) / 1e6


@pytest.mark.parametrize('arch', ['s', 'm', 'l'])
def test_sizes_match_the_paddledetection_zoo(arch):
    esnet = size_in_millions(build_detector(f'picodet-{arch}_esnet_8xb32-300e_coco-320.py'))
    castling = size_in_millions(build_detector(f'picodet-{arch}_castling_8xb32-300e_coco-320.py'))
    assert esnet == pytest.approx(ZOO[arch][0], rel=0.05)
    assert castling == pytest.approx(esnet, rel=0.02)  # the castling backbones are sized to match


def test_macs_match_the_zoo_flops():
    """The zoo counts FLOPs as two per multiply-accumulate (tools/analysis_tools/get_flops.py prints
    MACs, with the figures of every config in configs/picodet/README.md)."""
    model = build_detector('picodet-s_esnet_8xb32-300e_coco-320.py').eval()
    macs = count_flops(lambda: model(torch.zeros(1, 3, 320, 320), mode='tensor'))['total']
    assert 2 * macs / 1e9 == pytest.approx(ZOO['s'][1], rel=0.05)


def test_esnet_widths_follow_paddledetection():
    assert [make_divisible(w * 0.75) for w in (128, 256, 512)] == [96, 192, 384]
    assert [make_divisible(w * 1.25) for w in (128, 256, 512)] == [160, 320, 640]
    assert make_divisible(int(96 * 0.875), divisor=8) == 88


def test_channel_shuffle_interleaves_the_halves():
    x = torch.arange(6.0).view(1, 6, 1, 1)
    assert channel_shuffle(x, 2).flatten().tolist() == [0, 3, 1, 4, 2, 5]


@pytest.mark.parametrize('backbone',
                         [dict(type='ESNet', arch='s'), dict(type='CastlingLeViT', arch='s'),
                                      dict(type='CastlingLeViT', arch='s',
                                           attn_cfg=dict(type='SoftmaxAttention'))])
def test_levels_at_odd_input_sizes(backbone):
    model = MODELS.build(backbone)
    neck = MODELS.build(dict(type='CSPPAN', in_channels=model.out_channels, out_channels=32))
    feats = neck(model(torch.randn(2, 3, 97, 131)))
    assert [tuple(f.shape) for f in feats] == [(2, 32, 13, 17), (2, 32, 7, 9), (2, 32, 4, 5),
                                               (2, 32, 2, 3)]


def test_esnet_frozen_stages_stay_frozen():
    model = MODELS.build(dict(type='ESNet', arch='s', frozen_stages=1, norm_eval=True)).train()
    assert not any(p.requires_grad for p in model.stem.parameters())
    assert not any(p.requires_grad for p in model.stages[0].parameters())
    assert all(p.requires_grad for p in model.stages[1].parameters())
    assert not model.stages[2][0].conv_pw_mv1.bn.training


def small_picodet():
    init_default_scope('mmdet')
    torch.manual_seed(0)
    model = MODELS.build(ConfigDict(
        type='SingleStageDetector',
        data_preprocessor=dict(type='DetDataPreprocessor', pad_size_divisor=32),
        backbone=dict(type='ESNet', arch='s'),
        neck=dict(type='CSPPAN', in_channels=[96, 192, 384], out_channels=32),
        bbox_head=dict(type='PicoHead', num_classes=3, in_channels=32),
        train_cfg=dict(assigner=dict(type='SimOTAAssigner', iou_weight=6.0)),
        test_cfg=dict(nms_pre=100, score_thr=0.0, nms=dict(type='nms', iou_threshold=0.6),
                      max_per_img=10)))
    model.init_weights()
    return model


def batch(boxes):
    from mmdet.structures import DetDataSample
    meta = dict(img_shape=(96, 128), ori_shape=(96, 128), pad_shape=(96, 128),
                batch_input_shape=(96, 128), scale_factor=(1.0, 1.0))
    samples = [DetDataSample(metainfo=meta, gt_instances=InstanceData(
        bboxes=torch.tensor(b, dtype=torch.float32).view(-1, 4),
        labels=torch.arange(len(b)) % 3)) for b in boxes]
    return torch.rand(len(boxes), 3, 96, 128), samples


def test_loss_has_positives_and_empty_images_are_legal():
    model = small_picodet().train()
    inputs, samples = batch([[[8, 10, 50, 60], [60, 20, 90, 70]], []])
    losses = model.loss(inputs, samples)
    assert set(losses) == {'loss_cls', 'loss_bbox', 'loss_dfl'}
    assert all(torch.isfinite(v) for v in losses.values())
    assert losses['loss_bbox'] > 0 and losses['loss_dfl'] > 0
    sum(losses.values()).backward()
    assert model.bbox_head.predictors[0].weight.grad.abs().sum() > 0

    empty = model.loss(*batch([[], []]))
    assert empty['loss_bbox'] == 0 and empty['loss_dfl'] == 0 and empty['loss_cls'] > 0


def test_prediction_boxes_lie_inside_the_image():
    model = small_picodet().eval()
    inputs, samples = batch([[[8, 10, 50, 60]]])
    with torch.no_grad():
        result = model.predict(inputs, samples)[0].pred_instances
    assert 0 < len(result) <= 10
    assert (result.bboxes[:, 0::2] <= 128).all() and (result.bboxes[:, 1::2] <= 96).all()
    assert (result.bboxes >= 0).all() and set(result.labels.tolist()) <= {0, 1, 2}


@pytest.mark.parametrize('cfg, message', [
    (dict(type='ESNet', arch='xl'), "arch='xl'"),
    (dict(type='ESNet', out_indices=(3,)), 'out_indices=(3,)'),
    (dict(type='CastlingLeViT', arch='xs'), "arch='xs'"),
    (dict(type='CastlingLeViT', arch=dict(widths=(32, 64))), r'arch dict misses \['),
    (dict(type='CSPPAN', in_channels=[8, 16, 32], out_channels=8, num_extra_levels=2),
     'num_extra_levels=2'),
])
def test_bad_layouts_fail_in_one_line(cfg, message):
    with pytest.raises((KeyError, ValueError),
                       match=message.replace('(', r'\(').replace(')', r'\)')):
        MODELS.build(cfg)


def test_wrong_number_of_levels_fails_in_one_line():
    init_default_scope('mmdet')  # the head builds its coders from the scope's task utils
    neck = MODELS.build(dict(type='CSPPAN', in_channels=[8, 16, 32], out_channels=8))
    with pytest.raises(ValueError, match='got 2 levels; expected 3'):
        neck([torch.randn(1, 8, 8, 8), torch.randn(1, 16, 4, 4)])
    head = MODELS.build(dict(type='PicoHead', num_classes=3, in_channels=8))
    with pytest.raises(ValueError, match='got 3 feature levels; expected 4'):
        head([torch.randn(1, 8, 8, 8)] * 3)
