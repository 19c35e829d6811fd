"""Weights in from ``init_cfg`` (mmvisattn/models/backbones/pretrained.py): every published layout a
backbone reads loads, through ``init_cfg=dict(type='Pretrained', ...)``, to the bit what its
converter gives: official MsViT (classification and detectron2) and PerViT files written from the
golden fixtures, NVlabs / mmseg MiT and timm / mmseg / mmpretrain ViT files written from randomised
stock models; position embeddings are resized as mmseg's ViT does; a URL is downloaded through
torch's hub cache from a local HTTP server with its hash checked; and every bad checkpoint fails in
one line naming the file."""
import functools
import hashlib
import http.server
import re
import threading
from pathlib import Path

import pytest
import torch
from mmdet.registry import MODELS
from mmseg.models.backbones.mit import MixVisionTransformer
from mmseg.models.backbones.vit import VisionTransformer

from mmvisattn.models.backbones.castling_vit import convert_vit_state_dict
from mmvisattn.models.backbones.mit_rwgka import convert_mit_state_dict
from mmvisattn.models.backbones.pervit import convert_pervit_state_dict
from mmvisattn.models.backbones.vil import convert_vil_state_dict
from mmvisattn.utils.checkpoint import CheckpointError

from ...conftest import MODEL_CONFIGS, REPO, run_tool

FIXTURES = REPO / 'tests' / 'data' / 'official'
VIL_ARCH = dict(embed_dims=(16, 32, 48), depths=(1, 1, 1), num_heads=(2, 2, 3),
                patch_sizes=(4, 2, 2), windows=(3, 3, 3), num_global=(1, 1, 0))
MIT = dict(embed_dims=8, num_layers=(1, 1), num_heads=(1, 2), num_stages=2, patch_sizes=(7, 3),
           strides=(4, 2), sr_ratios=(2, 1), out_indices=(0, 1))
VIT = dict(img_size=(64, 64), patch_size=16, embed_dims=32, num_layers=2, num_heads=2,
           out_indices=(0, 1), final_norm=True)


def build(cfg: dict, checkpoint=None):
    torch.manual_seed(0)
    model = MODELS.build(dict(cfg, init_cfg=dict(type='Pretrained', checkpoint=str(checkpoint))
                              if checkpoint
                              else None))
    model.init_weights()
    return model


def randomised(module: torch.nn.Module) -> dict:
    torch.manual_seed(1)
    with torch.no_grad():
        for param in module.parameters():
            param.add_(torch.randn_like(param))
    return {key: value.clone() for key, value in module.state_dict().items()}


def assert_loads_as(model: torch.nn.Module, expected: dict) -> None:
    state = model.state_dict()
    assert expected and all(
        torch.equal(state[key], value) for key, value in expected.items() if key in state
    )


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    first, second = a.state_dict(), b.state_dict()
    assert first.keys() == second.keys() and all(
        torch.equal(first[key], second[key]) for key in first
    )


@pytest.mark.parametrize('wrapper, prefix', [('net', 'module.'), ('model', 'backbone.bottom_up.')])
def test_official_vil_files_load_as_the_converter_gives(tmp_path, wrapper, prefix):
    official = torch.load(FIXTURES / 'vil_msvit_tiny.pt', weights_only=True)['state_dict']
    path = tmp_path / 'msvit.pth'
    torch.save({wrapper: {prefix + key: value.float() for key, value in official.items()}}, path)
    cfg = dict(type='ViL', arch=VIL_ARCH, drop_path_rate=0.0)
    loaded, plain = build(cfg, path), build(cfg)
    expected, _ = convert_vil_state_dict({key: value.float() for key, value in official.items()},
                                         plain.state_dict())
    assert_loads_as(loaded, expected)


def test_official_pervit_file_loads_as_the_converter_gives(tmp_path):
    fixture = torch.load(FIXTURES / 'pervit_tiny.pt', weights_only=True)
    kwargs = fixture['official_kwargs']
    stem = tuple(kwargs['convstem_dims'][1:])
    cfg = dict(type='PerViT', arch=dict(num_heads=kwargs['num_heads'], depths=(2, 2, 6, 2),
                                        embed_dims=tuple(kwargs['emb_dims']), stem_channels=stem),
               out_indices=(3,))
    official = {key: value.float() for key, value in fixture['state_dict'].items()}
    torch.save({'model': official}, tmp_path / 'pervit.pth')
    expected, _ = convert_pervit_state_dict(official, num_stem_convs=len(stem))
    loaded = build(cfg, tmp_path / 'pervit.pth')
    assert_loads_as(loaded, expected)
    assert set(expected) >= set(loaded.state_dict())  # every weight came from the file


def nvlabs_layout(mmseg: dict) -> dict:
    """An mmseg MiT state dict in NVlabs SegFormer's names (the inverse of mmseg's mit2mmseg.py)."""
    nvlabs = {}
    for key, value in mmseg.items():
        stage, part, rest = re.match(r'^layers\.(\d+)\.(\d)\.(.+)$', key).groups()
        stage = int(stage) + 1
        if part == '0':
            nvlabs[f'patch_embed{stage}.{rest.replace("projection.", "proj.")}'] = value
        elif part == '2':
            nvlabs[f'norm{stage}.{rest}'] = value
        else:
            index, rest = rest.split('.', 1)
            block = f'block{stage}.{index}.'
            if rest.startswith('attn.attn.in_proj_'):
                kind, dims = rest.rsplit('_', 1)[1], value.shape[0] // 3
                nvlabs[f'{block}attn.q.{kind}'], nvlabs[f'{block}attn.kv.{kind}'] = (
                    value[:dims],
                    value[dims:],
                )
                continue
            for ours, theirs in {'attn.attn.out_proj.': 'attn.proj.', 'ffn.layers.0.': 'mlp.fc1.',
                                 'ffn.layers.1.': 'mlp.dwconv.dwconv.',
                                 'ffn.layers.4.': 'mlp.fc2.'}.items():
                if rest.startswith(ours):
                    squeeze = theirs in ('mlp.fc1.', 'mlp.fc2.') and rest.endswith('weight')
                    nvlabs[block + theirs
                           + rest[len(ours):]] = value[..., 0, 0] if squeeze else value
                    break
            else:
                nvlabs[block + rest] = value
    return nvlabs


@pytest.mark.parametrize('layout', ['mmseg', 'segformer', 'nvlabs'])
def test_mit_files_load_as_the_converter_gives(tmp_path, layout):
    mmseg = randomised(MixVisionTransformer(**MIT))
    files = dict(
        mmseg=mmseg,
        segformer={
            'state_dict': {
                **{f'backbone.{k}': v for k, v in mmseg.items()},
                'decode_head.conv_seg.weight': torch.ones(2),
            }
        },
        nvlabs={**nvlabs_layout(mmseg), 'head.weight': torch.ones(2)},
    )
    torch.save(files[layout], tmp_path / 'mit.pth')
    cfg = dict(type='MixVisionTransformerRWGKA', **MIT,
               attn_cfg=dict(type='RWGKAttention', num_anchors=4))
    loaded = build(cfg, tmp_path / 'mit.pth')
    expected, _ = convert_mit_state_dict(mmseg)
    assert_loads_as(loaded, expected)
    new = set(loaded.state_dict()) - set(expected)
    assert new and all('anchor' in key for key in new)  # only the RWGK anchors stay new


def vit_layouts(mmseg: dict) -> dict:
    """An mmseg ViT state dict in timm's and mmpretrain's names."""
    timm_parts = {'ln1': 'norm1', 'ln2': 'norm2', 'attn.attn.in_proj_weight': 'attn.qkv.weight',
                  'attn.attn.in_proj_bias': 'attn.qkv.bias', 'attn.attn.out_proj': 'attn.proj',
                  'ffn.layers.0.0': 'mlp.fc1', 'ffn.layers.1': 'mlp.fc2'}
    timm, mmpretrain = {}, {}
    for key, value in mmseg.items():
        layer = re.match(r'^layers\.(\d+)\.(.+)$', key)
        if layer is None:
            timm[{'patch_embed.projection.weight': 'patch_embed.proj.weight',
                  'ln1.weight': 'norm.weight', 'ln1.bias': 'norm.bias'}.get(key, key)] = value
            mmpretrain[f'backbone.{key}'] = value
            continue
        index, rest = layer.groups()
        part = next(p for p in timm_parts if rest.startswith(p))
        timm[f'blocks.{index}.{timm_parts[part]}{rest[len(part):]}'] = value
        mine = rest.replace('attn.attn.in_proj_',
                            'attn.qkv.').replace('attn.attn.out_proj.', 'attn.proj.')
        mmpretrain[f'backbone.layers.{index}.{mine}'] = value
    return dict(mmseg=mmseg, timm={'model': timm}, mmpretrain={'state_dict': mmpretrain})


def test_vit_files_in_every_layout_load_alike_and_resize_the_position_embedding(tmp_path):
    """Written at 32x32 (a 2x2 grid), loaded into a model of 64x64 (4x4): mmseg's own resizing."""
    stock = VisionTransformer(**dict(VIT, img_size=(32, 32)))
    layouts = vit_layouts(randomised(stock))
    loaded = {}
    for name, checkpoint in layouts.items():
        torch.save(checkpoint, tmp_path / f'{name}.pth')
        loaded[name] = build(dict(type='CastlingViT', **VIT), tmp_path / f'{name}.pth')
    assert_same_weights(loaded['mmseg'], loaded['timm'])
    assert_same_weights(loaded['mmseg'], loaded['mmpretrain'])
    timm, _ = convert_vit_state_dict(layouts['timm']['model'])
    resized = VisionTransformer.resize_pos_embed(timm['pos_embed'], (4, 4), (2, 2), 'bicubic')
    assert torch.equal(loaded['timm'].pos_embed, resized)
    assert torch.equal(loaded['timm'].layers[1].attn.attn.qkv.weight,
                       timm['layers.1.attn.attn.qkv.weight'])


def test_a_checkpoint_in_another_layout_or_of_another_size_fails_in_one_line(tmp_path):
    cfg = dict(type='ViL', arch=VIL_ARCH, drop_path_rate=0.0)
    torch.save({'state_dict': {'conv1.weight': torch.ones(1)}}, tmp_path / 'resnet.pth')
    with pytest.raises(CheckpointError,
                       match=r"^ViL: checkpoint '.*resnet.pth' is in no layout ViL reads "
                       r"\(expected "
                                              r"official MsViT .*; its first keys: "
                                              r"\['conv1.weight'\]\)$"):
        build(cfg, tmp_path / 'resnet.pth')
    wide = MODELS.build(dict(cfg, arch=dict(VIL_ARCH, embed_dims=(24, 32, 48)))).state_dict()
    torch.save(wide, tmp_path / 'wide.pth')
    with pytest.raises(CheckpointError,
                       match=r"^ViL: checkpoint '.*wide.pth': \d+ of its \d+ tensors do not fit "
                       r"this "
                                              r"ViL: stages.0.*\(expected \(16,"):
        build(cfg, tmp_path / 'wide.pth')
    with pytest.raises(CheckpointError, match=r"^checkpoint '.*missing.pth' does not exist$"):
        build(cfg, tmp_path / 'missing.pth')


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def served(tmp_path):
    """``(folder, url)``: a local HTTP server on 127.0.0.1 serving ``folder``."""
    folder = tmp_path / 'served'
    folder.mkdir()
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                             functools.partial(QuietHandler, directory=folder))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield folder, f'http://127.0.0.1:{server.server_address[1]}'
    server.shutdown()


def hashed(folder: Path, stem: str, checkpoint: dict, wrong: bool = False) -> str:
    """Save ``checkpoint`` as ``<stem>-<sha256 prefix>.pth`` (OpenMMLab's naming); the name."""
    scratch = folder / 'scratch.pth'
    torch.save(checkpoint, scratch)
    digest = hashlib.sha256(scratch.read_bytes()).hexdigest()[:8]
    name = f'{stem}-{"00000000" if wrong else digest}.pth'
    scratch.rename(folder / name)
    return name


def test_urls_download_through_the_hub_cache_with_their_hash_checked(served, tmp_path, monkeypatch):
    folder, url = served
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    mmseg = randomised(MixVisionTransformer(**MIT))
    cfg = dict(type='MixVisionTransformerRWGKA', **MIT,
               attn_cfg=dict(type='RWGKAttention', num_anchors=4))
    good = hashed(folder, 'mit_b0_20220624', mmseg)
    assert_loads_as(build(cfg, f'{url}/{good}'), convert_mit_state_dict(mmseg)[0])
    assert (tmp_path / 'torch_home' / 'hub' / 'checkpoints' / good).is_file()
    (folder / 'small').mkdir()
    # no hash: cached under its folder's name too
    torch.save(mmseg, folder / 'small' / 'model_best.pth')
    assert_loads_as(build(cfg, f'{url}/small/model_best.pth'), convert_mit_state_dict(mmseg)[0])
    assert (tmp_path / 'torch_home' / 'hub' / 'checkpoints' / 'small_model_best.pth').is_file()
    bad = hashed(folder, 'mit_b1_20220624', mmseg, wrong=True)
    with pytest.raises(CheckpointError,
                       match=rf"^checkpoint '{url}/{bad}' could not be used: invalid hash value"):
        build(cfg, f'{url}/{bad}')
    with pytest.raises(CheckpointError,
                       match=rf"^checkpoint '{url}/absent-12345678.pth' could not be downloaded"):
        build(cfg, f'{url}/absent-12345678.pth')


def test_train_downloads_and_loads_mit_weights_with_no_prior_step(
    served, workspace, tmp_path, monkeypatch
):
    """``tools/train.py`` on the SegFormer-RWGKA demo config with its backbone's ``init_cfg`` naming
    MiT-B0 weights by URL (randomised, served locally): one iteration, and the log says what
    loaded."""
    folder, url = served
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    mmseg = randomised(MixVisionTransformer(embed_dims=32, num_heads=[1, 2, 5, 8],
                                            num_layers=[2, 2, 2, 2]))
    name = hashed(folder, 'mit_b0_20220624', mmseg)
    config = tmp_path / 'from_url.py'
    demo = (
        REPO / 'configs/segformer_rwgka/segformer_mit-b0-rwgka_1xb8-600i_shapes-cityscapes-128.py'
    )
    init_cfg = f"dict(_delete_=True, type='Pretrained', checkpoint='{url}/{name}')"
    config.write_text(f"_base_ = '{demo}'\nmodel = dict(backbone=dict(init_cfg={init_cfg}))\n")
    done = run_tool(['tools/train.py', config, '--work-dir', tmp_path / 'work', '--cfg-options',
                     'train_cfg.max_iters=1', 'train_dataloader.batch_size=2'], cwd=workspace)
    log = done.stdout + done.stderr
    assert f'MixVisionTransformerRWGKA: loaded {url}/{name} as mmseg MiT' in log
    assert re.search(r'newly initialised \(\d+\): layers\.0\.1\.0\.attn\.attn\.anchor_k', log)


@functools.lru_cache(maxsize=None)
def backbone_checkpoints():
    """``(config, backbone init_cfg checkpoint)`` of every config whose backbone starts from
    weights."""
    from mmengine.config import Config
    found = []
    for path in MODEL_CONFIGS:
        init_cfg = Config.fromfile(str(path)).model.backbone.get('init_cfg') or {}
        if init_cfg.get('type') == 'Pretrained':
            found.append((path, init_cfg['checkpoint']))
    return found


def test_segformer_rwgka_configs_start_from_the_stock_segformer_weights():
    """Each SegFormer-RWGKA config names the ImageNet MiT URL stock mmseg's SegFormer config of the
    same size uses."""
    import mmseg
    from mmengine.config import Config
    stock_configs = Path(mmseg.__file__).parent / '.mim' / 'configs' / 'segformer'
    checked = 0
    for path, checkpoint in backbone_checkpoints():
        size = re.search(r'segformer_mit-(b\d)-rwgk', path.name)
        if size:
            stock = Config.fromfile(
                str(stock_configs / f'segformer_mit-{size[1]}_8xb1-160k_cityscapes-1024x1024.py')
            )
            assert checkpoint == stock.model.backbone.init_cfg.checkpoint, path.name
            checked += 1
    configs = [p for p in (REPO / 'configs' / 'segformer_rwgka').glob('segformer_mit-b*.py')
               if 'shapes' not in p.name]
    assert checked == len(configs) == 16


def test_every_named_checkpoint_is_in_its_folder_readme():
    """The weights a config starts from are listed in its folder's README (where they come from and
    how they load)."""
    missing = [
        f'{path.relative_to(REPO)}: {checkpoint}'
        for path, checkpoint in backbone_checkpoints()
        if checkpoint not in (path.parent / 'README.md').read_text()
    ]
    assert not missing, missing
