"""Pictures of what the attentions of a model look at, for one image.

    python tools/analysis_tools/visualize_attention.py --config C [--checkpoint K] --image I --out
    DIR

Any attention module that exposes its map is drawn. The protocol (see
``mmvisattn/models/attentions/peripheral.py``): a method

    attention_maps(x: Tensor, hw_shape: Tuple[int, int], query: Tuple[int, int]) -> Dict[str,
    Tensor]

returning named ``(heads, H, W)`` maps of what the spatial token at ``query = (row, col)`` attends
to, for the first image of ``x``, the tokens the module received. The tool records each such
module's input with a forward pre-hook while the backbone runs, then writes for every map name:

* ``<name>_centre.png``: a grid of layers (rows) x heads (columns) for the query at the centre of
  the token grid (PerViT's ``position`` map is the paper's Fig. 4);
* ``<name>_query-<row>x<col>.png``: the same for ``--queries`` sample queries on a diagonal.

Modules that also give their whole position attention, ``position_attention(hw_shape) ->
(heads, HW, HW)`` (``PeripheralAttention``), are classified into central / para-central / mid /
far-peripheral regions per layer and head (Eq. 11 with the radii of Eq. 38): ``regions.png``
(heads per region, layer by layer, as Fig. 5's bars) and ``regions.json``. The region analysis
(and the nonlocality of Eq. 13) is defined here, beside its only user.
"""
import argparse
import json
import math
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--config', required=True,
                        help='mmdet or mmseg config of a model of this project')
    parser.add_argument('--checkpoint', help='weights; without them the initialised model is drawn')
    parser.add_argument('--image', required=True, help='image file')
    parser.add_argument('--out', required=True, type=Path, help='directory for the PNGs')
    parser.add_argument('--size', type=int, nargs=2, metavar=('H', 'W'),
                        help='resize the image to H x W first')
    parser.add_argument('--queries', type=int, default=3, help='sample queries besides the centre')
    parser.add_argument('--device', default='cpu')
    return parser.parse_args(argv)


def build_model(config: str, checkpoint: str, device: str) -> torch.nn.Module:
    """The config's model (checked as ``tools/train.py`` checks it), with the checkpoint's weights,
    which must fit it; a bad config or checkpoint exits in one line."""
    import mmvisattn  # noqa: F401
    from mmvisattn.launch import check_model_fits_checkpoint, load_config, read_run_checkpoint
    from mmvisattn.launch.checks import model_weights
    from mmvisattn.registry import build_from_config
    model = build_from_config(load_config(config))
    model.init_weights()
    if checkpoint:
        weights = read_run_checkpoint(checkpoint)
        check_model_fits_checkpoint(model, weights, checkpoint,
                                    'is it a checkpoint of this config?')
        model.load_state_dict(model_weights(weights, checkpoint))
    return model.to(device).eval()


def load_image(path: str, model: torch.nn.Module, size) -> Tensor:
    """``(1, 3, H, W)`` normalised as the model's data preprocessor does."""
    import mmcv
    image = mmcv.imread(path)
    if image is None:
        raise SystemExit(f'error: cannot read image {path}')
    if size:
        image = mmcv.imresize(image, (size[1], size[0]))
    preprocessor = model.data_preprocessor
    tensor = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float()
    if getattr(preprocessor, '_channel_conversion', False):
        tensor = tensor.flip(0)
    if getattr(preprocessor, '_enable_normalize', False):
        tensor = (tensor - preprocessor.mean.cpu()) / preprocessor.std.cpu()
    return tensor[None]


def record_attention_inputs(model: torch.nn.Module,
                            image: Tensor) -> List[Tuple[str, torch.nn.Module, Tensor, tuple]]:
    """Run the backbone once; return ``(name, module, x, hw_shape)`` of every module with
    ``attention_maps``."""
    records, handles = [], []
    for name, module in model.named_modules():
        if callable(getattr(module, 'attention_maps', None)):
            def hook(mod, args, kwargs, name=name):
                x = args[0]
                hw_shape = args[1] if len(args) > 1 else kwargs['hw_shape']
                records.append((name, mod, x.detach(), tuple(hw_shape)))
            handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
    with torch.no_grad():
        model.backbone(image.to(next(model.parameters()).device))
    for handle in handles:
        handle.remove()
    if not records:
        raise SystemExit('error: no attention of this model exposes attention_maps(x, hw_shape, '
                         'query)')
    return records


def sample_queries(hw_shape: Sequence[int], count: int) -> List[Tuple[int, int]]:
    """The centre, then ``count`` points on the diagonal between the corners."""
    height, width = hw_shape
    points = [(height // 2, width // 2)]
    for i in range(1, count + 1):
        t = i / (count + 1)
        points.append((round(t * (height - 1)), round(t * (width - 1))))
    return list(dict.fromkeys(points))


def draw_grid(maps: List[Tuple[str, Tensor]], query: Tuple[int, int], title: str,
              path: Path) -> None:
    """Layers as rows, heads as columns, the query cell framed in red."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    heads = max(m.shape[0] for _, m in maps)
    figure, axes = plt.subplots(len(maps), heads, figsize=(1.6 * heads + 1, 1.6 * len(maps) + 0.6),
                                squeeze=False)
    for row, (layer, layer_maps) in enumerate(maps):
        for head in range(heads):
            axis = axes[row][head]
            axis.set_xticks([])
            axis.set_yticks([])
            if head >= layer_maps.shape[0]:
                axis.set_axis_off()
                continue
            axis.imshow(layer_maps[head].float().cpu().numpy(), cmap='viridis',
                        interpolation='nearest')
            axis.add_patch(Rectangle((query[1] - 0.5, query[0] - 0.5), 1, 1, fill=False,
                                     edgecolor='red', lw=1.5))
            if head == 0:
                axis.set_ylabel(layer, fontsize=7)
            if row == 0:
                axis.set_title(f'head {head}', fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def draw_regions(regions: Dict[str, List[int]], names: Sequence[str], path: Path) -> None:
    """Heads per region, one stacked bar per layer (Fig. 5's bar graphs)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    layers = list(regions)
    counts = np.array([[sum(1 for r in regions[layer]
                            if r == i) for i in range(len(names))] for layer in layers])
    figure, axis = plt.subplots(figsize=(max(6, 0.5 * len(layers) + 2), 4))
    bottom = np.zeros(len(layers))
    for i, name in enumerate(names):
        axis.bar(range(len(layers)), counts[:, i], bottom=bottom, label=name)
        bottom += counts[:, i]
    axis.set_xticks(range(len(layers)))
    axis.set_xticklabels([str(i + 1) for i in range(len(layers))])
    axis.set_xlabel('layer')
    axis.set_ylabel('heads')
    axis.set_title('peripheral region of each head (Eq. 11)')
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


# Appendix B, Eq. 37-38: angles of the central, para-central, mid- and far-peripheral regions
REGION_NAMES = ('central', 'para-central', 'mid-peripheral', 'far-peripheral')
REGION_ANGLES = (5.0, 40.0, 120.0, 220.0)


def region_radii(hw_shape: Sequence[int]) -> List[float]:
    """Eq. 38: ``r_p = sqrt(HW theta_p / (220 pi))`` in token cells (1.19, 3.37, 5.83, 7.9 at
    14x14)."""
    area = hw_shape[0] * hw_shape[1]
    return [math.sqrt(area * angle / (REGION_ANGLES[-1] * math.pi)) for angle in REGION_ANGLES]


def cell_distances(hw_shape: Sequence[int], device=None) -> Tensor:
    """``(HW, HW)`` Euclidean distances between token cells."""
    from mmvisattn.ops.utils.token_grid import grid_coordinates
    cells = torch.stack(grid_coordinates(hw_shape, device), dim=1).float()
    return torch.cdist(cells, cells)


def region_scores(phi_p: Tensor, hw_shape: Sequence[int]) -> Tensor:
    """Eq. 11's bracket for each head of ``(heads, HW, HW)`` ``Phi_p``: ``(heads, 4)`` mean over all
    query-key pairs of ``Phi_p`` times the indicator of each region's distance interval; the
    region of a head is the argmax."""
    distance = cell_distances(hw_shape, phi_p.device)
    edges = [0.0] + region_radii(hw_shape)
    masks = [(distance >= low) & (distance < high) for low, high in zip(edges[:-1], edges[1:])]
    return torch.stack([(phi_p * mask).mean(dim=(1, 2)) for mask in masks], dim=1)


def nonlocality(phi_p: Tensor, hw_shape: Sequence[int]) -> Tensor:
    """Eq. 13 per head: mean over query-key pairs of ``Phi_p`` times their distance in cells."""
    return (phi_p * cell_distances(hw_shape, phi_p.device)).mean(dim=(1, 2))


@torch.no_grad()
def main(argv=None) -> None:
    args = parse_args(argv)
    model = build_model(args.config, args.checkpoint, args.device)
    records = record_attention_inputs(model, load_image(args.image, model, args.size))
    args.out.mkdir(parents=True, exist_ok=True)
    written = []
    for query_index, query in enumerate(sample_queries(records[0][3], args.queries)):
        by_name: Dict[str, List[Tuple[str, Tensor]]] = {}
        for layer, module, x, hw_shape in records:
            cell = tuple(min(q, s - 1) for q, s in zip(query, hw_shape))
            for map_name, value in module.attention_maps(x, hw_shape, cell).items():
                by_name.setdefault(map_name, []).append((layer, value))
        for map_name, maps in by_name.items():
            suffix = 'centre' if query_index == 0 else f'query-{query[0]}x{query[1]}'
            path = args.out / f'{map_name}_{suffix}.png'
            draw_grid(maps, query,
                      f'{map_name} attention of token {query} on the {records[0][3]} grid', path)
            written.append(path)
    regions = {}
    for layer, module, _, hw_shape in records:
        if callable(getattr(module, 'position_attention', None)):
            scores = region_scores(module.position_attention(hw_shape), hw_shape)
            regions[layer] = scores.argmax(dim=1).tolist()
    if regions:
        draw_regions(regions, REGION_NAMES, args.out / 'regions.png')
        named = {layer: [REGION_NAMES[i] for i in heads] for layer, heads in regions.items()}
        (args.out / 'regions.json').write_text(json.dumps(named, indent=1))
        written += [args.out / 'regions.png', args.out / 'regions.json']
    print('\n'.join(f'wrote {path}' for path in written))


if __name__ == '__main__':
    main()
