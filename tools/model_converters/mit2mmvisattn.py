"""Turn a stock mmseg or NVlabs MiT / SegFormer checkpoint into an initialisation of
MixVisionTransformerRWGKA.

    python tools/model_converters/mit2mmvisattn.py SRC DST [--config CONFIG]

SRC holds mmseg's MiT keys (``layers.{i}.1.{j}.attn.attn.in_proj_weight`` ...), either bare (the
ImageNet backbone weights mmseg's SegFormer configs start from, or the output of mmseg's
``mit2mmseg.py``) or under ``backbone.`` in a whole SegFormer checkpoint (the prefix is kept), or
NVlabs' SegFormer names (``block1.0.attn.q`` ...), renamed to mmseg's first as mmseg's
``mit2mmseg.py`` does. The backbone reads the same files directly from
``init_cfg=dict(type='Pretrained', checkpoint=...)``; this is the offline form of that conversion.
Everything is copied as it is except the attention: the fused ``in_proj`` is split into ``q`` and
``kv``, ``out_proj`` becomes ``proj``, and the spatial-reduction ``sr`` conv and its ``norm`` are
dropped (RWGK attention has none; ``--keep-spatial-reduction`` keeps them for
``SpatialReductionAttention``). With ``--config`` the backbone of that config is built and the
converted weights are checked against it: the parameters that stay newly initialised (the
anchors) are listed, and any key or shape that does not fit fails the conversion.
"""
from mmvisattn.models.backbones.mit_rwgka import (
    MIT_ATTENTION_KEY,
    NVLABS_KEY,
    convert_mit_state_dict,
    convert_segformer_state_dict,
)
from mmvisattn.utils import (
    converter_arguments,
    read_converter_input,
    require_source_keys,
    save_converted,
)


def main(argv=None) -> None:
    parser = converter_arguments(__doc__.split('\n\n')[0],
                                 'stock mmseg or NVlabs MiT or SegFormer checkpoint')
    parser.add_argument('--keep-spatial-reduction', action='store_true',
                        help='keep sr/norm for a backbone built with SpatialReductionAttention')
    args = parser.parse_args(argv)
    state_dict = read_converter_input(args.src, args.dst)
    if any(NVLABS_KEY.match(key) for key in state_dict):
        state_dict = convert_segformer_state_dict(state_dict)
    require_source_keys(state_dict, args.src, MIT_ATTENTION_KEY,
                        'MiT attention keys (layers.I.1.J.attn.*); is it an mmseg MiT checkpoint?')
    converted, dropped = convert_mit_state_dict(state_dict, args.keep_spatial_reduction)
    print(f'converted {len(state_dict)} tensors: {len(dropped)} spatial-reduction tensors dropped, '
          f'attention in_proj/out_proj renamed to q, kv, proj')
    save_converted(converted, args.dst, args.config)


if __name__ == '__main__':
    main()
