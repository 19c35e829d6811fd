"""Write the golden fixtures of ``tests/data/official/`` from the official implementations.

    python tools/analysis_tools/make_official_fixtures.py PEERS_DIR [--out tests/data/official]

``PEERS_DIR`` holds the checkouts as ``owner+name`` folders (``microsoft+vision-longformer``,
``gaopengcuhk+SMCA-DETR``, ``juhongm999+pervit``, ``GATECH-EIC+Castling-ViT``), imported unmodified
(:mod:`.official_code`); stand-ins: a minimal ``timm.models.layers``, no-op ``.cuda()`` for PerViT,
SMCA's layer-0 MLP at the fixture's ``d_model`` and a fixed ``random.randrange`` for ViL's random
shift. Needs ``einops``.

Each fixture holds the official module's randomised ``state_dict``, float64 inputs, the eval output,
an upstream gradient and the input gradient (``weights_only`` loadable);
``tests/test_models/test_official_golden.py`` reproduces them (``MMVISATTN_OFFICIAL_FIXTURES=DIR``
for fresh ones). The checkouts' commits go into ``--out``'s README.
"""
import argparse
import functools
import importlib.util
import sys
import types
from pathlib import Path
from typing import Callable, Dict, Tuple

import torch
import torch.nn as nn

from lab.bench.official_code import (
    CASTLING,
    PERVIT,
    SMCA,
    VIL,
    checkout_on_path,
    commit_of,
    cuda_calls_stay_on_cpu,
    default_dtype,
    import_file,
    stub_timm,
)

REPOS = (VIL, SMCA, PERVIT, CASTLING)
NOISE = 0.2


def fail(message: str) -> None:
    print(f'make_official_fixtures: {message}', file=sys.stderr)
    raise SystemExit(1)


def randomise(module: nn.Module) -> None:
    """N(0, 0.2) noise on every parameter (zero-initialised biases and tables then matter); for
    BatchNorm, noise on the running mean and a log-normal factor on the running variance."""
    with torch.no_grad():
        for param in module.parameters():
            param.add_(torch.randn_like(param) * NOISE)
        for norm in module.modules():
            if isinstance(norm, nn.modules.batchnorm._BatchNorm):
                norm.running_mean.add_(torch.randn_like(norm.running_mean) * NOISE)
                norm.running_var.mul_(torch.exp(torch.randn_like(norm.running_var) * NOISE))


def plain_state_dict(module: nn.Module) -> Dict[str, torch.Tensor]:
    return {key: value.detach().clone() for key, value in module.state_dict().items()}


def forward_backward(run: Callable, inputs: Dict[str, torch.Tensor], grad_output: torch.Tensor,
                     main: str = 'x') -> Tuple[torch.Tensor, torch.Tensor]:
    leaves = {
        key: value.clone().requires_grad_(value.is_floating_point())
        for key, value in inputs.items()
    }
    output = run(leaves)
    output.backward(grad_output)
    return output.detach(), leaves[main].grad


def fixture(module: nn.Module, run: Callable, inputs: Dict[str, torch.Tensor],
            output_shape: Tuple[int, ...], kwargs: dict, source: str, **extra) -> dict:
    """Eval-mode output and input gradient of ``run`` for a seeded upstream gradient."""
    torch.manual_seed(2)
    grad_output = torch.randn(output_shape, dtype=torch.float64)
    module.eval()
    output, grad_input = forward_backward(run, inputs, grad_output)
    return dict(state_dict=plain_state_dict(module), inputs=inputs, output=output,
                grad_output=grad_output, grad_input=grad_input, grad_params={},
                official_kwargs=kwargs, source=source, dtype='float64',
                randomisation=f'official init, then N(0, {NOISE}) added to every parameter',
                **extra)


def build(factory: Callable[[], nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    module = factory().double()
    randomise(module)
    return module


# ---------------------------------------------------------------- ViL
def vil_attention_fixtures(peers: Path) -> Dict[str, dict]:
    layers = peers / VIL / 'src' / 'models' / 'layers'
    longformer = import_file('vil_layers.longformer2d', layers / 'longformer2d.py',
                             package_dir=layers)
    cases = {'vil_attn_chunk': (0, 1, (9, 11), (-1, 2, 7)), 'vil_attn_exact': (1, 1, (9, 11), ()),
             'vil_attn_cyclic': (-1, 1, (9, 12), (-1, 7)), 'vil_attn_noglobal': (0, 0, (8, 10), ())}
    out = {}
    for name, (exact, nglo, (nx, ny), train_modes) in cases.items():
        kwargs = dict(dim=32, num_heads=2, qkv_bias=True, qk_scale=None, attn_drop=0.0,
                      proj_drop=0.0, w=3, d=1, autoregressive=False, sharew=True, nglo=nglo,
                      only_glo=False, exact=exact, autograd=False, rpe=True, mode=0)
        module = build(lambda: longformer.Long2DSCSelfAttention(**kwargs))  # noqa: B023
        torch.manual_seed(1)
        inputs = {'x': torch.randn(2, nglo + nx * ny, 32, dtype=torch.float64)}
        result = fixture(module, lambda leaves: module(leaves['x'], nx, ny),  # noqa: B023
                         inputs, (2, nglo + nx * ny, 32), kwargs,
                         'microsoft/vision-longformer '
                         'src/models/layers/longformer2d.py:Long2DSCSelfAttention',
                         forward_args=dict(nx=nx, ny=ny),
                         layout='x (B, nglo + nx * ny, C), global tokens first, the map row-major '
                         '(x slow) -> same shape; module(x, nx, ny); train_runs: module.train(), '
                                'module.mode set, random.randrange fixed to sampled_neighbour')
        if train_modes:
            result['train_runs'] = [vil_train_run(module, longformer, result, mode, nx,
                                                  ny) for mode in train_modes]
        out[name] = result
    return out


def vil_train_run(module: nn.Module, longformer: types.ModuleType, result: dict, mode: int, nx: int,
                  ny: int) -> dict:
    """A training-mode pass: mode -1 (own chunk), or random shifting with neighbour ``mode``."""
    module.train()
    module.mode = -1 if mode < 0 else 1
    original = longformer.random
    longformer.random = types.SimpleNamespace(randrange=lambda low, high: mode)
    try:
        output, grad_input = forward_backward(lambda leaves: module(leaves['x'], nx, ny),
                                              result['inputs'], result['grad_output'])
    finally:
        longformer.random = original
        module.mode = 0
    run = dict(module_mode=-1 if mode < 0 else 1, output=output, grad_input=grad_input)
    if mode > 0:
        run['sampled_neighbour'] = mode
    return run


# two small MsViTs: three sliding-chunk stages (w 3, padded), and the classification layout, whose
# last stage is full attention on a 7x7 map with a 13x13 table
MSVIT_CASES = {
    'vil_msvit_tiny': (
        'l1,h2,d16,n1,s1,g1,p4,f3,a0_l2,h2,d32,n1,s1,g1,p2,f3,a0_l3,h3,d48,n1,s1,g0,p2,f3,a0', 64,
    ),
    'vil_msvit_fullattn': (
        'l1,h1,d16,n1,s1,g1,p4,f3,a0_l2,h2,d16,n1,s1,g1,p1,f3,a0_l3,h2,d16,n1,s1,g1,p1,f3,a0_'
        'l4,h2,d16,n1,s0,g1,p1,f7,a0', 28,
    ),
}


def msvit_fixtures(peers: Path) -> Dict[str, dict]:
    models = peers / VIL / 'src' / 'models'
    import_file('vil_models.layers.longformer2d', models / 'layers' / 'longformer2d.py',
                package_dir=models / 'layers')
    stand_in = sys.modules['vil_models.layers']
    stand_in.Long2DSCSelfAttention = sys.modules[
        'vil_models.layers.longformer2d'
    ].Long2DSCSelfAttention
    for unused in ('FastAttention', 'PerformerSelfAttention', 'LinformerSelfAttention',
                   'SRSelfAttention'):
        setattr(stand_in, unused, None)
    msvit = import_file('vil_models.msvit', models / 'msvit.py', package_dir=models)
    return {name: msvit_fixture(msvit, arch, size) for name, (arch, size) in MSVIT_CASES.items()}


def msvit_fixture(msvit: types.ModuleType, arch: str, size: int) -> dict:
    kwargs = dict(arch=arch, img_size=size, in_chans=3, num_classes=10, qkv_bias=True,
                  qk_scale=None, drop_rate=0.0, attn_drop_rate=0.0, drop_path_rate=0.0,
                  norm_embed=True, w=7, d=1, sharew=True, only_glo=False, share_kv=False,
                  attn_type='longformerhand', sw_exact=0, mode=0, ln_eps=1e-6, avg_pool=False)
    module = build(lambda: msvit.MsViT(norm_layer=functools.partial(nn.LayerNorm, eps=1e-6),
                                       **kwargs))
    torch.manual_seed(1)
    inputs = {'x': torch.randn(2, 3, size, size, dtype=torch.float64)}
    stages = {}

    def keep(stage: int, output: Tuple[torch.Tensor, int, int]) -> None:
        tokens, nx, ny = output  # each official stage returns its tokens and its grid
        stages.update({f'layer{stage}_tokens': tokens.detach(), f'layer{stage}_hw': [nx, ny]})

    layers = [layer for layer in (module.layer1, module.layer2, module.layer3, module.layer4)
              if layer is not None]
    hooks = [layer.register_forward_hook(lambda mod, args, out, k=k: keep(k, out))
             for k, layer in enumerate(layers, start=1)]
    result = fixture(module, lambda leaves: module(leaves['x']), inputs, (2, 10),
                     dict(kwargs, norm_layer_eps=1e-6),
                     'microsoft/vision-longformer src/models/msvit.py:MsViT', forward_args={},
                     layout=f'image (B, 3, {size}, {size}) -> logits (B, 10); stage_outputs: each '
                     'layerK output (B, nglo + nx * ny, C) and its [nx, ny]; features: '
                            'forward_features(image)')
    for hook in hooks:
        hook.remove()
    stages['features'] = module.forward_features(inputs['x']).detach()
    result['stage_outputs'] = stages
    return result


# ---------------------------------------------------------------- SMCA
def smca_fixture(peers: Path) -> dict:
    root = peers / SMCA / 'models'
    import_file('smca_models.attention_layer', root / 'attention_layer.py', package_dir=root)
    transformer = import_file('smca_models.transformer', root / 'transformer.py')
    d_model, heads, (height, width), queries = 64, 8, (6, 9), 7
    official_mlp = transformer.MLP
    transformer.MLP = lambda i, h, o, n: official_mlp(d_model if i == 256 else i,
                                                      d_model if h == 256 else h, o, n)
    kwargs = dict(dynamic_scale='type3', smooth=8, d_model=d_model, nhead=heads,
                  dim_feedforward=128, dropout=0.0, activation='relu', normalize_before=False,
                  num_decoder_layers=2, return_intermediate=True)

    torch.manual_seed(0)
    layers = [transformer.TransformerDecoderLayer('type3', 8, index, d_model, heads, 128, 0.0,
                                                  'relu', False)
              for index in range(2)]
    module = transformer.TransformerDecoder(layers, 2, nn.LayerNorm(d_model),
                                            return_intermediate=True).double()
    for param in module.parameters():  # Transformer._reset_parameters, then the scale heads' init
        if param.dim() > 1:
            nn.init.xavier_uniform_(param)
    for layer in module.layers:
        nn.init.zeros_(layer.point3.weight)
        nn.init.ones_(layer.point3.bias)
    randomise(module)
    transformer.MLP = official_mlp
    torch.manual_seed(1)
    tokens, batch = height * width, 2
    inputs = dict(memory=torch.randn(tokens, batch, d_model, dtype=torch.float64),
                  pos=torch.randn(tokens, batch, d_model, dtype=torch.float64),
                  query_pos=torch.randn(queries, batch, d_model, dtype=torch.float64),
                  tgt=torch.zeros(queries, batch, d_model, dtype=torch.float64))
    mask = torch.zeros(batch, height, width, dtype=torch.bool)
    mask[1, :, -2:] = True
    grid_y, grid_x = torch.meshgrid(torch.arange(height), torch.arange(width), indexing='ij')
    grid = torch.stack((grid_x, grid_y),
                       2).double().reshape(-1, 2).unsqueeze(1).repeat(1, batch * heads, 1)
    valid_width = (~mask[:, 0]).sum(1).double() * 32
    h_w = torch.stack([valid_width, torch.full_like(valid_width, height * 32)], dim=1).unsqueeze(0)
    inputs.update(memory_key_padding_mask=mask.flatten(1), grid=grid, h_w=h_w)
    torch.manual_seed(2)
    grad_hidden = torch.randn(2, queries, batch, d_model, dtype=torch.float64)
    grad_reference = torch.randn(queries, batch, 2, dtype=torch.float64)
    module.eval()
    leaves = {key: value.clone().requires_grad_(key in ('memory', 'pos', 'query_pos', 'tgt'))
              for key, value in inputs.items()}
    hidden, reference = module(leaves['grid'], leaves['h_w'], leaves['tgt'], leaves['memory'],
                               memory_key_padding_mask=leaves['memory_key_padding_mask'],
                               pos=leaves['pos'], query_pos=leaves['query_pos'])
    ((hidden * grad_hidden).sum() + (reference * grad_reference).sum()).backward()
    return dict(
        state_dict=plain_state_dict(module), inputs=inputs, output=hidden.detach(),
        grad_output=grad_hidden, grad_input=leaves['memory'].grad, grad_params={},
        official_kwargs=kwargs, forward_args=dict(feature_hw=[height, width]),
        reference_logits=reference.detach(), grad_output_reference_logits=grad_reference,
        grad_inputs_extra={
            f'grad_{name}': leaves[name].grad for name in ('pos', 'query_pos', 'tgt')
        },
        source='gaopengcuhk/SMCA-DETR models/transformer.py:TransformerDecoder', dtype='float64',
        layout='sequence-first: memory, pos (H * W, B, C), query_pos, tgt (Q, B, C); '
        'output: hidden states (layers, Q, B, C); reference_logits: layer 0 point1 (Q, B, 2); h_w '
        '(1, B, 2) = (valid width, height) in pixels at stride 32; backward of sum(hs * '
        'grad_output) + sum(reference_logits * grad_output_reference_logits)',
        randomisation=f'official init, then N(0, {NOISE}) added to every parameter',
    )


# ---------------------------------------------------------------- PerViT
def pervit_fixtures(peers: Path) -> Dict[str, dict]:
    with checkout_on_path(peers / PERVIT):
        from model import pervit
        from model.utils import OffsetGenerator
    with cuda_calls_stay_on_cpu(), default_dtype(torch.float64):
        OffsetGenerator.initialize(7, pad_size=2)
        rpe_dist = OffsetGenerator.get_qk_vec().norm(p=2, dim=-1, keepdim=True)
    kwargs = dict(dim=48, num_heads=3, qkv_bias=False, qk_scale=None, attn_drop=0.0, proj_drop=0.0,
                  norm_init=[-1.0, 2.0])
    torch.manual_seed(0)
    mpa = pervit.MPA(**dict(kwargs, norm_init=torch.tensor(kwargs['norm_init']))).double()
    rpe_proj = nn.Linear(1, 12).double()  # VisionTransformer.rpe_proj, with its peripheral init
    nn.init.constant_(rpe_proj.weight, -0.02)
    nn.init.zeros_(rpe_proj.bias)
    randomise(nn.ModuleList([mpa, rpe_proj]))
    torch.manual_seed(1)
    inputs = {'x': torch.randn(2, 49, 48, dtype=torch.float64), 'rpe_dist': rpe_dist}
    mpa_result = fixture(mpa, lambda leaves: mpa(leaves['x'], rpe_proj(leaves['rpe_dist'])), inputs,
                         (2, 49, 48), kwargs, 'juhongm999/pervit model/pervit.py:MPA',
                         forward_args=dict(grid=[7, 7], rpe_pad_size=2),
                         layout='x (B, 49, C) on a 7x7 grid, rpe_dist (121, 121, 1): '
                         'OffsetGenerator distances of '
                                'the grid padded by 2 -> (B, 49, C); mpa(x, rpe_proj(rpe_dist))',
                         rpe_proj_state_dict={f'rpe_proj.{k}': v.detach().clone()
                                              for k, v in rpe_proj.state_dict().items()})
    model_kwargs = dict(img_size=224, patch_size=16, in_chans=3, num_classes=10, num_heads=2,
                        mlp_ratio=4.0, qkv_bias=False, qk_scale=None, drop_rate=0.0,
                        attn_drop_rate=0.0, drop_path_rate=0.0, use_pos_embed=False,
                        emb_dims=[8, 16, 16, 24], convstem_dims=[3, 8])
    # float64 by default, so that the model's non-buffer ``rpe`` distances are float64 too
    with cuda_calls_stay_on_cpu(), default_dtype(torch.float64):
        model = build(
            lambda: pervit.VisionTransformer(
                norm_layer=functools.partial(nn.LayerNorm, eps=1e-6), **model_kwargs
            )
        )
    torch.manual_seed(1)
    image = {'x': torch.randn(2, 3, 28, 28, dtype=torch.float64)}
    model_result = fixture(model, lambda leaves: model(leaves['x']), image, (2, 10),
                           dict(model_kwargs, norm_layer_eps=1e-6),
                           'juhongm999/pervit model/pervit.py:VisionTransformer', forward_args={},
                           layout='image (B, 3, 28, 28) -> logits (B, 10): one stride-2 stem conv, '
                           'a 14x14 grid')
    return {'pervit_mpa': mpa_result, 'pervit_tiny': model_result}


# ---------------------------------------------------------------- Castling
def castling_fixtures(peers: Path) -> Dict[str, dict]:
    attention = import_file('castling_attention', peers / CASTLING / 'attention.py')
    out = {}
    for name, sparse in (('castling_linangular', False), ('castling_linangular_sparse', True)):
        kwargs = dict(in_channels=64, num_heads=4, qkv_bias=False, attn_drop=0.0, proj_drop=0.0,
                      res_kernel_size=9, sparse_reg=sparse)
        module = build(lambda: attention.LinAngularAttention(**kwargs))  # noqa: B023
        torch.manual_seed(1)
        inputs = {'x': torch.randn(2, 50, 64, dtype=torch.float64)}
        out[name] = fixture(module, lambda leaves: module(leaves['x']),  # noqa: B023
                            inputs, (2, 50, 64), kwargs,
                            'GATECH-EIC/Castling-ViT attention.py:LinAngularAttention',
                            forward_args={}, layout='x (B, N, C) -> (B, N, C); module(x)')
        if sparse:
            out[name].update(sparse_margin(module, inputs['x']))
    return out


def sparse_margin(module: nn.Module, x: torch.Tensor) -> Dict[str, float]:
    """How far the softmax weights stay from the sparse branch's hard threshold (0.02): an
    implementation that agrees far below this margin keeps the same entries."""
    with torch.no_grad():
        batch, tokens, channels = x.shape
        qkv = module.qkv(x).view(batch, tokens, 3, module.num_heads, -1).permute(2, 0, 3, 1, 4)
        weights = (qkv[0] * module.scale @ qkv[1].transpose(-2, -1)).softmax(dim=-1)
    return dict(sparse_threshold_margin=(weights - 0.02).abs().min().item(),
                sparse_kept_fraction=(weights > 0.02).double().mean().item())


def write_readme(out: Path, peers: Path, files: Dict[str, dict]) -> None:
    lines = ['# Golden fixtures from the official implementations', '',
             'Written by `python tools/analysis_tools/make_official_fixtures.py PEERS_DIR` (see '
             'its docstring for the stand-ins it needs) and reproduced by '
             '`tests/test_models/test_official_golden.py`. Float64, batch 2; '
             '`torch.manual_seed(0)` before building (official init, then N(0, 0.2) added to every '
             'parameter; BatchNorm running mean + N(0, 0.2), running variance x exp(N(0, 0.2))), 1 '
             'before the inputs, 2 before the upstream gradients. Each file loads with '
             '`torch.load(path, weights_only=True)` and holds `state_dict` (official key names), '
             '`inputs`, `output` (eval mode), `grad_output`, `grad_input`, `official_kwargs`, '
             '`forward_args`, `source`, `layout`.', '',
             '| repository | commit |', '|---|---|']
    lines += [f'| {repo.replace("+", "/")} | `{commit_of(peers / repo)}` |' for repo in REPOS]
    lines += ['', '| file | bytes | official file:class | layout | kwargs |',
              '|---|---|---|---|---|']
    for name, data in sorted(files.items()):
        size = (out / f'{name}.pt').stat().st_size
        lines.append(f'| `{name}.pt` | {size} | {data["source"]} | {data["layout"]} | '
                     f'`{data["official_kwargs"]}` |')
    lines += ['', 'Official-code facts a consumer needs: SMCA hard-codes 8 heads and a layer-0 '
                  '`MLP(256, 256, 2, 3)` (built here at d_model 64); PerViT fixes a 14x14 token '
                  'grid (`num_patches = 196`); the ViL `*_global` entries equal the local ones '
                  'where `sharew=True`; the official cyclic mask differs on padded maps, so the '
                  'cyclic file uses 9x12 (no padding).']
    (out / 'README.md').write_text('\n'.join(lines) + '\n')


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('peers', type=Path,
                        help='folder of owner+name checkouts of the official repositories')
    parser.add_argument('--out', type=Path, default=Path('tests/data/official'))
    args = parser.parse_args(argv)
    missing = [repo for repo in REPOS if not (args.peers / repo).is_dir()]
    if missing:
        fail(f'{args.peers} lacks the checkouts {", ".join(missing)}; expected one folder per '
             'repository')
    if importlib.util.find_spec('einops') is None:
        fail(
            'the official ViL and PerViT code imports einops; install it with `pip install einops`'
        )
    stub_timm()
    files = {}
    for make in (vil_attention_fixtures, pervit_fixtures, castling_fixtures):
        files.update(make(args.peers))
    files.update(msvit_fixtures(args.peers))
    files['smca_decoder'] = smca_fixture(args.peers)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        torch.save(data, args.out / f'{name}.pt')
        torch.load(args.out / f'{name}.pt', weights_only=True)
    write_readme(args.out, args.peers, files)
    total = sum((args.out / f'{name}.pt').stat().st_size for name in files)
    print(f'wrote {len(files)} fixtures ({total / 1e6:.2f} MB) to {args.out}')


if __name__ == '__main__':
    main()
