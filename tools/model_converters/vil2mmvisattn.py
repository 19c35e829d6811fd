"""Turn an official Vision Longformer checkpoint into an initialisation of the ViL backbone.

    python tools/model_converters/vil2mmvisattn.py SRC DST --config CONFIG

SRC is a classification checkpoint of microsoft/vision-longformer (weights under ``net`` with a
``module.`` prefix) or a detectron2 checkpoint of microsoft/VisionLongformerForObjectDetection
(under ``model``, prefix ``backbone.bottom_up.``). CONFIG gives the target backbone:
relative-position tables are re-centred to its windows (indexed by token offset, so the offsets both
tables cover keep their bias; a full-attention stage's table lands exactly inside the sliding-chunk
one), absolute position embeddings are resized to its grid (1-D), global-token
parameters to its number of global tokens, full-attention ``qkv`` is split into ``query`` / ``kv``.
Official keys without a place are listed; the conversion fails if a backbone weight stays unset.
"""
from mmvisattn.models.backbones.vil import convert_vil_state_dict
from mmvisattn.utils import converter_arguments, read_converter_input, save_converted
from mmvisattn.utils.checkpoint import backbone_state_dict, check_backbone_weights


def main(argv=None) -> None:
    args = converter_arguments(__doc__.split('\n\n')[0],
                               'official ViL checkpoint (classification or detectron2)',
                               'config whose ViL backbone receives the weights',
                               config_required=True).parse_args(argv)
    state_dict = read_converter_input(args.src, args.dst, ('net', 'model'))
    try:
        # built once: the layout to convert to and check against
        target = backbone_state_dict(args.config)
        converted, unmapped = convert_vil_state_dict(state_dict, target)
        unset = check_backbone_weights(args.config, converted, target)
    except ValueError as exc:
        raise SystemExit(f'error: {exc}') from None
    print(f'converted {len(converted)} tensors; official keys without a place ({len(unmapped)}): '
          f'{", ".join(unmapped) or "none"}')
    if unset:
        raise SystemExit(f'error: {len(unset)} backbone weights stay unset, e.g. {unset[:3]}; '
                         f'is {args.src} a ViL checkpoint of this layout?')
    save_converted(converted, args.dst)


if __name__ == '__main__':
    main()
