"""Turn an official PerViT ImageNet checkpoint (``juhongm999/pervit``) into an initialisation of
mmvisattn's PerViT backbone.

    python tools/model_converters/pervit2mmvisattn.py SRC DST [--config CONFIG]

SRC is the official ``pervit_{tiny,small,medium}`` checkpoint (weights under ``model``, or a bare
state dict). The convolutional stem ``conv_layers.conv_layers.{i}`` / ``conv_layers.conv1x1``
becomes ``stem.{i}`` / ``stem.4``, each block's ``conv.proj`` becomes ``cpe``, ``attn.to_qkv``
``attn.qkv`` and the peripheral position encoding ``attn.activation.{conv1, gn1, conv2, gn2}``
``attn.position.{conv1, norm1, conv2, norm2}``; the shared ``rpe_proj`` keeps its name, the final
``norm`` becomes the last stage's output norm ``norm3`` and the classifier ``head`` is dropped. With
``--config`` the backbone of that config is built and the converted weights are checked against it:
a checkpoint of another width fails in one line, and the parameters left newly initialised (the
output norms of the other stages) are listed.
"""
from mmvisattn.models.backbones.pervit import OFFICIAL_KEY, convert_pervit_state_dict
from mmvisattn.utils import (
    converter_arguments,
    read_converter_input,
    require_source_keys,
    save_converted,
)


def main(argv=None) -> None:
    args = converter_arguments(__doc__.split('\n\n')[0],
                               'official PerViT checkpoint').parse_args(argv)
    state_dict = read_converter_input(args.src, args.dst, ('model', 'state_dict'))
    require_source_keys(state_dict, args.src, OFFICIAL_KEY, 'official PerViT attention keys '
                        '(blocks.I.attn.activation.*); is it a juhongm999/pervit checkpoint?')
    try:
        converted, dropped = convert_pervit_state_dict(state_dict)
    except KeyError as exc:
        raise SystemExit(f'error: {exc.args[0]}') from None
    print(f'converted {len(converted)} tensors, dropped {len(dropped)} '
          f'({", ".join(dropped) or "none"})')
    save_converted(converted, args.dst, args.config)


if __name__ == '__main__':
    main()
