"""The ImageNet-1k configs (mmpretrain scope): sizes against the papers' tables, metafile entries,
and the hand-off of an mmpretrain classifier's checkpoint to every detection and segmentation config
of the same backbone (``init_cfg=dict(type='Pretrained', checkpoint=...)``): the backbone bit-equal,
what detection does not build named in the loading line, EMA checkpoints, and checkpoints of another
model refused in one line."""
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import torch
import yaml
from mmengine.config import Config
from mmengine.registry import init_default_scope

from mmvisattn.models.backbones import pretrained
from mmvisattn.registry import build_from_config, models_of_scope
from mmvisattn.utils.checkpoint import CheckpointError
from mmvisattn.utils.complexity import count_flops, count_parameters

from ..conftest import MODEL_CONFIGS, REPO

IN1K = sorted((REPO / 'configs').rglob('*_in1k.py'))

# parameters (M) and FLOPs (G, multiply-accumulates) at 224 of the papers' tables, and the top-1
# they report
PAPER = {
    # ViL supplementary, Tables 12 and 13 (1-1-9-1)
    'vil/vil-tiny_8xb128_in1k.py': (6.7, 1.33, 76.18),
    'vil/vil-small_8xb128_in1k.py': (24.6, 4.86, 81.99),  # (1-2-8-1)
    'pervit/pervit-t_8xb128_in1k.py': (7.6, 1.6, 78.8),  # PerViT, Table 6 and Table A5
    'pervit/pervit-s_8xb128_in1k.py': (21.3, 4.4, 82.1),
    'pervit/pervit-m_8xb128_in1k.py': (43.7, 9.0, 82.9),
    'smca/deit-tiny-ripple_4xb256_in1k.py': (5.78, None, 73.02),  # ripple, Table 1
    # DeiT-B's size; the talk gives no ImageNet row
    'castling/castling-vit-b_16xb64_in1k.py': (86.6, None, None),
}
PARAMETER_TOLERANCE = 0.03  # Table A5's, the loosest the detection tables use
# ViL: the sliding-chunk form computes the 3 x 3 chunks of 7 x 7 tokens around a query (441 keys)
# where the paper counts the 15 x 15 window (225) it masks them to
VIL_FLOP_TOLERANCE = 0.06


def relative(config: str) -> str:
    return str(Path(config).relative_to(REPO / 'configs'))


def classifier(config: Path) -> torch.nn.Module:
    return build_from_config(str(config)).eval()


def flops_at_224(model: torch.nn.Module) -> float:
    image = torch.zeros(1, 3, 224, 224)
    with torch.no_grad():
        return count_flops(lambda: model(image, mode='tensor'))['total'] / 1e9


@pytest.mark.parametrize('config', sorted(PAPER), ids=str)
def test_sizes_match_the_papers(config: str):
    model = classifier(REPO / 'configs' / config)
    params, flops, _ = PAPER[config]
    assert count_parameters(model) / 1e6 == pytest.approx(params, rel=PARAMETER_TOLERANCE)
    if config.startswith('vil/'):
        assert flops_at_224(model) == pytest.approx(flops, rel=VIL_FLOP_TOLERANCE)


def test_pervit_flops_are_the_official_layouts_not_table_6s():
    """PerViT's Table 6 gives 1.6 / 4.4 / 9.0 GFLOPs; the layouts of Table A5, which the official
    code builds and this project equals (test_official_golden.py), count 2.10 / 6.03 / 12.23 G
    multiply-accumulates at 224 (the linear layers alone, 196 tokens x 12 d^2 a block, are 1.37 /
    3.88 / 8.08 G). The paper does not say how it counted; the difference is pinned here and stated
    in the PerViT README."""
    measured = {
        arch: flops_at_224(classifier(REPO / f'configs/pervit/pervit-{arch}_8xb128_in1k.py'))
        for arch in ('t', 's', 'm')
    }
    assert [round(measured[arch], 2) for arch in ('t', 's', 'm')] == [2.10, 6.03, 12.23]


def metafile_models() -> Dict[str, dict]:
    models = {}
    for metafile in (REPO / 'configs').glob('*/metafile.yml'):
        for model in yaml.safe_load(metafile.read_text())['Models']:
            models[model['Config']] = model
    return models


@pytest.mark.parametrize('config', IN1K, ids=relative)
def test_metafile_gives_the_papers_top1_and_the_measured_size(config: Path):
    entry = metafile_models()[str(config.relative_to(REPO))]
    top1 = PAPER.get(relative(config), (None, None, None))[2]
    results = entry.get('Results') or []
    assert [result['Metrics']['Top 1 Accuracy'] for result in results] == ([top1] if top1 else [])
    assert all(result['Dataset'] == 'ImageNet-1k' for result in results)
    model = classifier(config)
    assert entry['Metadata']['Parameters'] == f'{count_parameters(model) / 1e6:.2f}M'


# ---------------------------------------------------------------- hand-off to the dense configs
# the attention a backbone builds when its config names none
DEFAULT_ATTENTION = {'ViL': 'LongformerAttention'}


def backbone_key(backbone: dict) -> Tuple:
    """What makes two backbone configs the same network: type, size and attention type (ViL's
    classification layouts, ``<arch>-cls``, are the detection ones plus a class token; the
    attention's options, such as ViL's random shifting, change no weight)."""
    arch = backbone.get('arch')
    arch = arch.removesuffix('-cls') if isinstance(arch, str) else arch
    attention = (backbone.get('attn_cfg')
                 or {}).get('type', DEFAULT_ATTENTION.get(backbone['type']))
    return (backbone['type'], arch, backbone.get('embed_dims'), str(backbone.get('num_layers')),
            attention)


def dense_configs() -> List[Tuple[Path, Path]]:
    """``(classification config, dense config)`` for every detection and segmentation config (not
    the shapes demos) whose backbone an ImageNet config pretrains."""
    by_key = {backbone_key(Config.fromfile(path).model.backbone): path for path in IN1K}
    pairs = []
    for path in MODEL_CONFIGS:
        if 'shapes' in path.name:
            continue
        cfg = Config.fromfile(path)
        backbone = cfg.model.get('backbone', {})
        if (
            cfg.default_scope != 'mmpretrain'
            and 'type' in backbone
            and backbone_key(backbone) in by_key
        ):
            pairs.append((by_key[backbone_key(backbone)], path))
    return pairs


DENSE = dense_configs()


@pytest.fixture(scope='module')
def classifier_checkpoints(tmp_path_factory) -> Dict[Path, Path]:
    """Each ImageNet config's classifier, randomly initialised, saved as mmpretrain saves it
    (written once)."""
    folder, written = tmp_path_factory.mktemp('in1k'), {}

    def checkpoint(config: Path) -> Path:
        if config not in written:
            torch.manual_seed(0)
            model = classifier(config)
            model.init_weights()
            written[config] = folder / f'{config.stem}.pth'
            torch.save({'state_dict': model.state_dict(), 'meta': {}}, written[config])
        return written[config]
    return checkpoint


def pretrained_backbone(config: Path, checkpoint: Path, monkeypatch,
                        **init) -> Tuple[torch.nn.Module, str]:
    """The dense config's backbone started from ``checkpoint``, and the line its loading logged."""
    cfg = Config.fromfile(config)
    backbone = cfg.model.backbone
    backbone.init_cfg = dict(type='Pretrained', checkpoint=str(checkpoint), **init)
    init_default_scope(cfg.default_scope)
    model = models_of_scope(cfg.default_scope).build(backbone)
    lines: List[str] = []
    monkeypatch.setattr(pretrained, 'print_log', lambda line, **kwargs: lines.append(line))
    model.init_weights()
    assert len(lines) == 1, lines
    return model, lines[0]


@pytest.mark.parametrize('pair', DENSE,
                         ids=lambda pair: f'{relative(pair[0])}->{relative(pair[1])}')
def test_a_classifier_checkpoint_starts_every_dense_config_of_its_backbone(
    pair, classifier_checkpoints, monkeypatch
):
    in1k, dense = pair
    path = classifier_checkpoints(in1k)
    model, line = pretrained_backbone(dense, path, monkeypatch)
    saved = torch.load(path, weights_only=True)['state_dict']
    target = model.state_dict()
    # what only the dense backbone has: PerViT's norms of the earlier stages' outputs
    only_dense = sorted(key for key in target if f'backbone.{key}' not in saved)
    assert ('from an mmpretrain classifier' in line
            and f'newly initialised ({len(only_dense)})' in line), line
    assert all(key.startswith(('norm0.', 'norm1.', 'norm2.')) for key in only_dense), only_dense
    for key, value in target.items():
        # pos_embed: resized to the dense input, below
        if key != 'pos_embed' and key not in only_dense:
            assert torch.equal(value, saved[f'backbone.{key}']), key
    assert 'head.' in line.split('dropped')[1]
    if 'pos_embed' in target:
        assert target['pos_embed'].shape != saved['backbone.pos_embed'].shape


def test_the_family_pairs_cover_every_pretrained_family():
    families = [Config.fromfile(dense).model.backbone.type for _, dense in DENSE]
    assert {family: families.count(family) for family in set(families)} == {
        'ViL': 20, 'PerViT': 4, 'CastlingViT': 1, 'CastlingLeViT': 7,
        'MixVisionTransformerRWGKA': 16}


def test_vil_hands_on_without_its_last_stage_class_token(classifier_checkpoints, monkeypatch):
    path = classifier_checkpoints(REPO / 'configs/vil/vil-tiny_8xb128_in1k.py')
    _, line = pretrained_backbone(REPO / 'configs/vil/retinanet_vil-tiny_fpn_1x_coco.py', path,
                                  monkeypatch)
    dropped = line.split('dropped (')[1]
    for key in ('head.fc.weight', 'norm.weight', 'stages.3.cls_token'):
        assert key in dropped, line


def ema_checkpoint(config: Path, path: Path) -> Dict[str, torch.Tensor]:
    """A classifier checkpoint as mmengine's EMAHook writes it, and the raw weights it holds."""
    from mmengine.hooks import EMAHook
    from mmengine.model import ExponentialMovingAverage
    torch.manual_seed(0)
    model = classifier(config)
    hook = EMAHook()
    hook.ema_model = ExponentialMovingAverage(model)
    with torch.no_grad():
        for parameter in hook.ema_model.parameters():
            parameter.add_(1.0)  # the average differs from the raw weights
    checkpoint = {'state_dict': model.state_dict(), 'meta': {}}
    raw = {key: value.clone() for key, value in checkpoint['state_dict'].items()}
    hook.before_save_checkpoint(None, checkpoint)
    torch.save(checkpoint, path)
    return raw


def handed_on(model: torch.nn.Module,
              classifier_state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """The backbone's weights that the classifier has (PerViT's dense outputs have norms of their
    own)."""
    handed = {
        key: value
        for key, value in model.state_dict().items()
        if f'backbone.{key}' in classifier_state
    }
    assert handed
    return handed


def test_an_ema_checkpoint_hands_on_the_raw_weights_unless_asked(tmp_path, monkeypatch):
    config = REPO / 'configs/pervit/pervit-demo_1xb32-300i_shapes-imagenet-64.py'
    dense = REPO / 'configs/pervit/upernet_pervit-t_1xb8-600i_shapes-cityscapes-128.py'
    raw = ema_checkpoint(config, tmp_path / 'ema.pth')
    demo_backbone = dict(Config.fromfile(config).model.backbone, out_indices=(0, 1, 2, 3))
    dense_cfg = tmp_path / 'dense.py'
    dense_cfg.write_text(f'_base_ = {str(dense)!r}\nmodel = dict(backbone=dict(_delete_=True, '
                         f'**{demo_backbone!r}))\n')
    model, line = pretrained_backbone(dense_cfg, tmp_path / 'ema.pth', monkeypatch)
    assert 'the raw weights (the EMA copy' in line
    assert all(
        torch.equal(value, raw[f'backbone.{key}']) for key, value in handed_on(model, raw).items()
    )
    model, line = pretrained_backbone(dense_cfg, tmp_path / 'ema.pth', monkeypatch, use_ema=True)
    assert 'the EMA weights' in line
    assert any(value.is_floating_point() and not torch.equal(value, raw[f'backbone.{key}'])
               for key, value in handed_on(model, raw).items())


def test_a_checkpoint_of_another_family_or_size_fails_in_one_line(
    classifier_checkpoints, monkeypatch, tmp_path
):
    vil = REPO / 'configs/vil/retinanet_vil-tiny_fpn_1x_coco.py'
    pervit = classifier_checkpoints(REPO / 'configs/pervit/pervit-t_8xb128_in1k.py')
    with pytest.raises(CheckpointError,
                       match=r"^ViL: checkpoint '.*pervit-t_8xb128_in1k.pth' is in no layout ViL "
                                              r"reads \(.*; none of its 292 keys fits; its first "
                                              r"keys: .*\)$"):
        pretrained_backbone(vil, pervit, monkeypatch)
    # a few names in common (a final norm, a patch embedding) do not make another model's weights
    # this one's
    mixed = torch.load(pervit, weights_only=True)['state_dict']
    mixed.update(
        {
            f'backbone.stages.0.patch_embed.norm.{name}': torch.ones(48)
            for name in ('weight', 'bias')
        }
    )
    torch.save({'state_dict': mixed}, tmp_path / 'mixed.pth')
    with pytest.raises(CheckpointError,
                       match=r"^ViL: checkpoint '.*mixed.pth': 292 of its 294 keys do not fit this "
                                              r"ViL \(first: stem.0.0.weight, .*the weights of "
                                              r"another model\?$"):
        pretrained_backbone(vil, tmp_path / 'mixed.pth', monkeypatch)
    small = classifier_checkpoints(REPO / 'configs/vil/vil-small_8xb128_in1k.py')
    with pytest.raises(CheckpointError,
                       match=r"^ViL: checkpoint '.*vil-small_8xb128_in1k.pth': \d+ of its \d+ "
                                              r"tensors do not fit this ViL: "):
        pretrained_backbone(vil, small, monkeypatch)
    with pytest.raises(CheckpointError, match='holds no EMA weights'):
        pretrained_backbone(vil,
                            classifier_checkpoints(REPO / 'configs/vil/vil-tiny_8xb128_in1k.py'),
                            monkeypatch, use_ema=True)


def test_the_imagenet_pipelines_run_on_this_stack(workspace):
    """mmpretrain's DeiT pipelines (RandAugment's operations, random erasing, bicubic resizing) on
    torch 2.13 and numpy 2, over the shapes data's classification split in ImageNet's folder
    layout."""
    from mmpretrain.registry import DATASETS
    cfg = Config.fromfile(REPO / 'configs/vil/vil-small_8xb128_in1k.py')
    init_default_scope('mmpretrain')
    for loader, samples in (('train_dataloader', 120), ('val_dataloader', 4)):
        dataset = DATASETS.build(dict(type='CustomDataset',
                                      data_root=str(workspace / 'data/shapes/imagenet'),
                                      data_prefix='train', pipeline=cfg[loader].dataset.pipeline))
        for index in range(samples):
            packed = dataset[index * 10]
            assert packed['inputs'].shape == (3, 224, 224) and packed['inputs'].dtype == torch.uint8
            assert packed['data_samples'].gt_label.item() == dataset.get_gt_labels()[index * 10]
