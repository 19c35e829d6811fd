"""SMCA (single scale) with encoder attention from ATTENTIONS: the Gaussian modulation against an
explicit computation and against softmax attention written out, reference centres and scales,
padded batches, one-line errors, initialisation, and sizes against Table 3 of the ripple-attention
paper (arXiv:2110.02453)."""
import copy

import pytest
import torch
import torch.nn.functional as F
from mmdet.registry import MODELS
from mmdet.structures import DetDataSample
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.structures import InstanceData

import mmvisattn  # noqa: F401
from mmvisattn.models.detectors.smca import reference_scale
from mmvisattn.models.layers.smca_transformer import (
    SCALE_CHANNELS,
    SMCATransformerDecoderLayer,
    SMCATransformerEncoder,
    gaussian_log_weights,
)

from ...conftest import REPO

DEMO = REPO / 'configs/smca/smca_r18_1xb8-600i_shapes-coco-128.py'
LAYER = dict(self_attn_cfg=dict(embed_dims=32, num_heads=4, dropout=0.0),
             cross_attn_cfg=dict(embed_dims=32, num_heads=4, dropout=0.0),
             ffn_cfg=dict(embed_dims=32, feedforward_channels=64, ffn_drop=0.0))


def explicit_log_weights(centres, scales, hw_shape, smooth):
    """One cell at a time: -sum_d s_d (p_d - g_d)^2 / smooth (+ s_xy dx^2 dy^2)."""
    batch, queries, heads, _ = centres.shape
    out = torch.zeros(batch, heads, queries, hw_shape[0] * hw_shape[1], dtype=centres.dtype)
    for b in range(batch):
        for q in range(queries):
            for h in range(heads):
                for y in range(hw_shape[0]):
                    for x in range(hw_shape[1]):
                        dx2 = (centres[b, q, h, 0] - x) ** 2
                        dy2 = (centres[b, q, h, 1] - y) ** 2
                        s = [1.0, 1.0, 0.0] if scales is None else scales[b, q, h].tolist()
                        if len(s) == 1:
                            s = [s[0], s[0], 0.0]
                        s = s + [0.0] * (3 - len(s))
                        out[b, h, q, y * hw_shape[1]
                            + x] = -(s[0] * dx2 + s[1] * dy2 + s[2] * dx2 * dy2) / smooth
    return out


@pytest.mark.parametrize('channels', [0, 1, 2, 3])
def test_gaussian_log_weights_equal_explicit_sum(channels):
    torch.manual_seed(0)
    hw_shape = (3, 5)
    centres = torch.rand(2, 3, 2, 2, dtype=torch.float64) * 5
    scales = torch.rand(2, 3, 2, channels, dtype=torch.float64) if channels else None
    torch.testing.assert_close(gaussian_log_weights(centres, scales, hw_shape, 8.0),
                               explicit_log_weights(centres, scales, hw_shape, 8.0))


def decoder_layer(scale_type='per_head_xy', predict_reference=True):
    torch.manual_seed(0)
    layer = SMCATransformerDecoderLayer(scale_type=scale_type, predict_reference=predict_reference,
                                        **copy.deepcopy(LAYER))
    layer.init_weights()
    return layer.eval()


@pytest.mark.parametrize('scale_type', sorted(SCALE_CHANNELS))
def test_co_attention_is_softmax_of_logits_plus_log_gaussian(scale_type):
    """The cross-attention of the layer, rebuilt by hand: per head softmax(q k^T / sqrt(d) + log G)
    v with G from the layer's own reference, offset and scale heads; padded keys get no weight."""
    layer = decoder_layer(scale_type).double()
    if layer.scale_proj is not None:
        torch.nn.init.normal_(layer.scale_proj.weight, std=0.1)  # scales away from their start of 1
    batch, queries, hw_shape, dims, heads = 2, 3, (3, 4), 32, 4
    query, query_pos = torch.randn(2, batch, queries, dims, dtype=torch.float64)
    memory, memory_pos = torch.randn(2, batch, 12, dims, dtype=torch.float64)
    padding = torch.zeros(batch, *hw_shape, dtype=torch.bool)
    padding[1, :, 3] = True
    padding = padding.flatten(1)
    ref_scale = torch.tensor([[4.0, 3.0], [3.0, 3.0]], dtype=torch.float64)
    captured = {}
    layer.cross_attn.register_forward_hook(lambda module, args, kwargs,
                                           out: captured.update(out=out, **kwargs),
                                           with_kwargs=True)
    _, reference = layer(query, memory, memory, query_pos, memory_pos, padding, hw_shape, ref_scale)

    normed = layer.norm_query(query + query_pos)
    centres = (reference * ref_scale[:, None]).unsqueeze(2) + layer.offset_proj(normed).view(
        batch, queries, heads, 2
    )
    scales = (
        None
        if layer.scale_proj is None
        else layer.scale_proj(normed).view(batch, queries, heads, -1) ** 2
    )
    log_g = explicit_log_weights(centres, scales, hw_shape,
                                 8.0).masked_fill(padding[:, None, None], float('-inf'))
    attn = layer.cross_attn.attn
    w_q, w_k, w_v = attn.in_proj_weight.chunk(3)
    b_q, b_k, b_v = attn.in_proj_bias.chunk(3)
    q = F.linear(captured['query'] + query_pos, w_q,
                 b_q).view(batch, queries, heads, -1).transpose(1, 2)
    k = F.linear(memory + memory_pos, w_k, b_k).view(batch, 12, heads, -1).transpose(1, 2)
    v = F.linear(memory, w_v, b_v).view(batch, 12, heads, -1).transpose(1, 2)
    weights = torch.softmax(q @ k.transpose(-1, -2) / (dims // heads) ** 0.5 + log_g, dim=-1)
    assert torch.all(weights[1, ..., 3::4] == 0)
    out = attn.out_proj((weights @ v).transpose(1, 2).reshape(batch, queries, dims))
    torch.testing.assert_close(captured['out'], captured['query'] + out)


def test_reference_centres_and_scales():
    first, later = decoder_layer(), decoder_layer(predict_reference=False)
    assert first.ref_point_head is not None and later.ref_point_head is None
    for scale_type, channels in SCALE_CHANNELS.items():
        layer = decoder_layer(scale_type)
        assert (layer.scale_proj.out_features if channels else 0) == channels * 4
    # scales start at 1 (weight 0, bias 1), as the official code
    assert torch.all(first.scale_proj.weight == 0) and torch.all(first.scale_proj.bias == 1)
    query, query_pos, memory, memory_pos = torch.randn(4, 2, 5, 32)
    ref_scale = torch.tensor([[5.0, 1.0], [2.5, 1.0]])
    out, reference = first(query, memory, memory, query_pos, memory_pos, None, (1, 5), ref_scale)
    assert out.shape == (2, 5, 32) and reference.shape == (2, 5, 2)
    assert torch.all((reference > 0) & (reference < 1))
    _, passed_on = later(out, memory, memory, query_pos, memory_pos, None, (1, 5), ref_scale,
                         reference)
    assert passed_on is reference


def test_reference_scale_is_the_unpadded_image_in_feature_cells():
    samples = [DetDataSample(metainfo=dict(img_shape=(96, 128), batch_input_shape=(96, 128))),
               DetDataSample(metainfo=dict(img_shape=(64, 96), batch_input_shape=(96, 128)))]
    feat = torch.zeros(2, 8, 3, 4)  # stride 32
    torch.testing.assert_close(reference_scale(samples, feat),
                               torch.tensor([[4.0, 3.0], [3.0, 2.0]]))


def test_reference_span_does_not_depend_on_the_batch():
    """The official ``h_w / 32``: a 100-pixel-wide image spans 3.125 cells alone (a 4-cell map)
    and in a 150-wide batch (5 cells); the batch-relative span would give 4.0 and 3.33."""
    feats = {100: torch.zeros(1, 8, 3, 4), 150: torch.zeros(1, 8, 3, 5)}
    spans = [
        reference_scale(
            [DetDataSample(metainfo=dict(img_shape=(90, 100), batch_input_shape=(90, width)))], feat
        )[0]
        for width, feat in feats.items()
    ]
    torch.testing.assert_close(spans[0], torch.tensor([3.125, 2.8125]))
    torch.testing.assert_close(spans[1], spans[0])


def test_an_image_alone_and_in_a_padded_batch_gives_the_same_boxes():
    """A 90x100 image alone (a 3x4 map, no padding) and padded into a 128x128 batch (4x4 map, its
    3x4 cells valid): with the same backbone features the transformer and head give the same boxes,
    because the span is the image's own width / 32 (3.125 cells), as the official ``h_w / 32``.
    (The backbone itself sees zero padding differently at the image border, in SMCA as in DETR, so
    the features are shared here.)"""
    cfg = Config.fromfile(DEMO)
    init_default_scope('mmdet')
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    model.double().eval()  # float64, so that 1e-5 px measures the method, not float32 rounding

    def predict(feat, batch_shape):
        samples = [DetDataSample(metainfo=dict(img_shape=shape, ori_shape=shape,
                                               scale_factor=(1.0, 1.0),
                                               batch_input_shape=batch_shape))
                   for shape in [(90, 100), (128, 128)][:feat.shape[0]]]
        with torch.no_grad():
            head_inputs = model.forward_transformer((feat,), samples)
            return model.bbox_head.predict(**head_inputs, batch_data_samples=samples,
                                           rescale=False)[0]

    channels = model.positional_encoding.num_feats * 2
    alone = torch.randn(1, channels, 3, 4, dtype=torch.float64)
    batched = torch.randn(2, channels, 4, 4, dtype=torch.float64)
    batched[0, :, :3, :] = alone[0]
    one, two = predict(alone, (90, 100)), predict(batched, (128, 128))
    torch.testing.assert_close(two.bboxes, one.bboxes, rtol=0, atol=1e-5)
    torch.testing.assert_close(two.scores, one.scores, rtol=0, atol=1e-5)


def test_padded_images_attend_within_their_own_grid():
    """Encoder: each image of a padded batch gives what it gives alone (softmax: key padding)."""
    torch.manual_seed(0)
    encoder = SMCATransformerEncoder(num_layers=2, layer_cfg=dict(
        attn_cfg=dict(type='SoftmaxAttention'), embed_dims=32, num_heads=4, dropout=0.0,
        ffn_cfg=dict(embed_dims=32, feedforward_channels=64, ffn_drop=0.0))).eval()
    feat, pos = torch.randn(2, 2, 4, 5, 32)
    padding = torch.zeros(2, 4, 5, dtype=torch.bool)
    padding[1, 3:] = True
    padding[1, :, 2:] = True
    batched = encoder(feat.flatten(1, 2), pos.flatten(1, 2), padding.flatten(1),
                      (4, 5)).view(2, 4, 5, 32)
    alone = encoder(feat[1:, :3, :2].flatten(1, 2), pos[1:, :3, :2].flatten(1, 2), None, (3, 2))
    torch.testing.assert_close(batched[1, :3, :2], alone.view(3, 2, 32))
    full = encoder(feat[:1].flatten(1, 2), pos[:1].flatten(1, 2), None, (4, 5))
    torch.testing.assert_close(batched[0], full.view(4, 5, 32))


def test_detector_trains_and_predicts_on_images_of_different_sizes():
    cfg = Config.fromfile(DEMO)
    init_default_scope('mmdet')
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    sizes = [(64, 96), (96, 64)]
    samples = [
        DetDataSample(
            gt_instances=InstanceData(
                bboxes=torch.tensor([[4.0, 6.0, 40.0, 50.0]]), labels=torch.tensor([i])
            ),
            metainfo=dict(img_shape=size, ori_shape=size, scale_factor=(1.0, 1.0)),
        )
        for i, size in enumerate(sizes)
    ]
    batch = dict(inputs=[torch.randint(0, 255, (3, *size), dtype=torch.uint8) for size in sizes],
                 data_samples=samples)
    model.train()
    data = model.data_preprocessor(batch, training=True)
    assert data['inputs'].shape[-2:] == (96, 96)
    losses = model.loss(data['inputs'], data['data_samples'])
    total, _ = model.parse_losses(losses)
    total.backward()
    assert torch.isfinite(total) and 'd0.loss_bbox' in losses
    model.eval()
    with torch.no_grad():
        results = model.predict(data['inputs'], data['data_samples'])
    assert [len(r.pred_instances) for r in results] == [10, 10]


@pytest.mark.parametrize('change, error, message', [
    (dict(decoder=dict(layer_cfg=dict(scale_type='diagonal'))), ValueError,
     "scale_type='diagonal'"),
    (dict(decoder=dict(layer_cfg=dict(smooth=0.0))), ValueError, 'smooth=0.0'),
    (dict(encoder=dict(layer_cfg=dict(attn_cfg=dict(type='NoSuchAttention')))), KeyError,
     'NoSuchAttention'),
    (dict(positional_encoding=dict(num_feats=32)), ValueError, 'num_feats=32'),
])
def test_bad_configs_fail_in_one_line(change, error, message):
    cfg = Config.fromfile(DEMO)
    cfg.merge_from_dict({'model': change})
    init_default_scope('mmdet')
    with pytest.raises(error, match=message) as info:
        MODELS.build(cfg.model)
    assert '\n' not in str(info.value)


def test_decoder_layer_without_reference_fails_in_one_line():
    later = decoder_layer(predict_reference=False)
    query = torch.randn(1, 2, 32)
    with pytest.raises(ValueError, match='no reference centres'):
        later(query, query, query, query, query, None, (1, 2), torch.ones(1, 2))


def test_init_keeps_the_gaussian_feature_map_of_ripple_attention():
    """C.6 initialises the transformer with Xavier; the feature map's W1 stays standard Gaussian
    (C.1)."""
    cfg = Config.fromfile(DEMO)
    cfg.merge_from_dict({'model.encoder.layer_cfg.attn_cfg': dict(type='RippleAttention')})
    init_default_scope('mmdet')
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    attn = model.encoder.layers[0].self_attn
    assert 0.8 < attn.feature_map.w1.std().item() < 1.2
    bound = (6 / sum(attn.qkv.weight.shape)) ** 0.5  # Xavier-uniform bound of the qkv projection
    assert attn.qkv.weight.abs().max().item() <= bound


@pytest.mark.parametrize('config, paper_millions', [
    ('smca_r50_8xb2-50e_coco.py', 41.5), ('smca-la_r50_8xb2-50e_coco.py', 41.7),
    ('smca-ripple_r50_8xb2-50e_coco.py', 41.8),
])
def test_sizes_match_table_3(config, paper_millions):
    cfg = Config.fromfile(REPO / 'configs/smca' / config)
    cfg.model.backbone.init_cfg = None
    init_default_scope('mmdet')
    model = MODELS.build(cfg.model)
    millions = sum(p.numel() for p in model.parameters()) / 1e6
    assert abs(millions / paper_millions - 1) < 0.02, millions
