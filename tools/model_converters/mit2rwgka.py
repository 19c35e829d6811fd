"""Turn a stock mmseg MiT / SegFormer checkpoint into an initialisation of MixVisionTransformerRWGKA.

    python tools/model_converters/mit2rwgka.py SRC DST [--config CONFIG]

SRC holds mmseg's MiT keys (``layers.{i}.1.{j}.attn.attn.in_proj_weight`` ...), either bare (the
ImageNet backbone weights mmseg's SegFormer configs start from, or the output of mmseg's
``mit2mmseg.py``) or under ``backbone.`` in a whole SegFormer checkpoint; the prefix is kept.
Everything is copied as it is except the attention: the fused ``in_proj`` is split into ``q`` and
``kv``, ``out_proj`` becomes ``proj``, and the spatial-reduction ``sr`` conv and its ``norm`` are
dropped (RWGK attention has none; ``--keep-spatial-reduction`` keeps them for
``SpatialReductionAttention``). With ``--config`` the backbone of that config is built and the
converted weights are checked against it: the parameters that stay newly initialised (the
anchors) are listed, and any key or shape that does not fit fails the conversion.
"""
import argparse
from typing import Dict, List

import torch
from torch import Tensor

from mmvisattn.models.backbones.mit_rwgka import MIT_ATTENTION_KEY, convert_mit_state_dict

def check_against(config: str, converted: Dict[str, Tensor]) -> List[str]:
    """Build the config's backbone; returns its parameter names the checkpoint does not set."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope

    import mmvisattn  # noqa: F401
    cfg = Config.fromfile(config)
    init_default_scope(cfg.default_scope)
    from mmseg.registry import MODELS
    backbone_cfg = cfg.model.backbone
    backbone_cfg.pop('init_cfg', None)
    expected = MODELS.build(backbone_cfg).state_dict()
    prefix = 'backbone.' if any(k.startswith('backbone.') for k in converted) else ''
    weights = {k[len(prefix):]: v for k, v in converted.items() if k.startswith(prefix)}
    unexpected = sorted(set(weights) - set(expected))
    if unexpected:
        raise SystemExit(f'error: {len(unexpected)} checkpoint keys have no place in the backbone of {config}, '
                         f'e.g. {unexpected[:3]}')
    for key, value in weights.items():
        if value.shape != expected[key].shape:
            raise SystemExit(f'error: checkpoint {key} has shape {tuple(value.shape)}, the backbone of {config} '
                             f'expects {tuple(expected[key].shape)} (a checkpoint of another width?)')
    return sorted(set(expected) - set(weights))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('src', help='stock mmseg MiT or SegFormer checkpoint')
    parser.add_argument('dst', help='where to save the converted checkpoint')
    parser.add_argument('--config', help='check the result against the backbone of this config')
    parser.add_argument('--keep-spatial-reduction', action='store_true',
                        help='keep sr/norm for a backbone built with SpatialReductionAttention')
    args = parser.parse_args(argv)
    checkpoint = torch.load(args.src, map_location='cpu', weights_only=True)
    state_dict = checkpoint.get('state_dict', checkpoint)
    if not any(MIT_ATTENTION_KEY.match(k) for k in state_dict):
        raise SystemExit(f'error: {args.src} holds no MiT attention keys (layers.I.1.J.attn.*); '
                         'is it an mmseg MiT checkpoint?')
    converted, dropped = convert_mit_state_dict(state_dict, args.keep_spatial_reduction)
    print(f'converted {len(state_dict)} tensors: {len(dropped)} spatial-reduction tensors dropped, '
          f'attention in_proj/out_proj renamed to q, kv, proj')
    if args.config:
        new = check_against(args.config, converted)
        print(f'newly initialised in the backbone ({len(new)}): ' + (', '.join(new) if new else 'none'))
    torch.save({'state_dict': converted}, args.dst)
    print(f'saved {args.dst}')


if __name__ == '__main__':
    main()
