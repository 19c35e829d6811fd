"""Turn a timm or MAE ViT checkpoint into an initialisation of CastlingViT.

    python tools/model_converters/vit2mmvisattn.py SRC DST [--config CONFIG]

SRC is a timm state dict (``blocks.{i}.attn.qkv`` ...) or an MAE checkpoint (the same keys under
``model``). Patch embedding, position embedding, class token, blocks and the final norm are
renamed to mmseg's ViT names; the classification head, ``fc_norm`` and MAE's decoder are dropped.
With ``--config`` the converted weights are checked against that config's backbone: what stays
newly initialised (the castling depthwise convolutions) is listed, and a key or shape that does
not fit (a checkpoint of another width) fails in one line.
"""
import re

from mmvisattn.models.backbones.castling_vit import convert_vit_state_dict
from mmvisattn.utils import (
    converter_arguments,
    read_converter_input,
    require_source_keys,
    save_converted,
)


def main(argv=None) -> None:
    args = converter_arguments(__doc__.split('\n\n')[0],
                               'timm or MAE ViT checkpoint').parse_args(argv)
    state_dict = read_converter_input(args.src, args.dst, ('model', 'state_dict'))
    require_source_keys(state_dict, args.src, re.compile(r'blocks\.'),
                        'timm ViT blocks (blocks.I.*); is it a timm or MAE ViT?')
    converted, dropped = convert_vit_state_dict(state_dict)
    print(f'converted {len(converted)} tensors, dropped {len(dropped)}: '
          f'{", ".join(dropped) or "none"}')
    save_converted(converted, args.dst, args.config)


if __name__ == '__main__':
    main()
