"""Predict on images with any config of the project and draw the predictions.

    python demo/image_demo.py IMAGE CONFIG [--weights CKPT] [--out-dir DIR] [--device cpu] [--score-thr 0.3]

IMAGE is a file or a folder of images. Detection configs (``default_scope='mmdet'``) go through
mmdet's ``DetInferencer``, segmentation configs through mmseg's ``MMSegInferencer``: the stock
clients, once ``mmvisattn`` is imported. The drawn images land in ``DIR/vis/`` (mmseg also
writes the label maps to ``DIR/pred/``); nothing is written elsewhere. Without ``--weights`` the
model keeps its initialisation (class names from the config's test dataset), which shows the
pipeline, not a result.
"""
import argparse
import os.path as osp
import sys

from mmengine.config import Config

import mmvisattn  # noqa: F401  (registers the project's models in mmdet and mmseg)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('image', help='an image file or a folder of images')
    parser.add_argument('config')
    parser.add_argument('--weights', help='checkpoint (default: none, the model as initialised)')
    parser.add_argument('--out-dir', default='outputs', help='the drawn images go to OUT_DIR/vis/')
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--score-thr', type=float, default=0.3, help='detection: smallest score drawn')
    return parser.parse_args(argv)


def check_paths(args: argparse.Namespace) -> str:
    """The config's scope; every missing file is named in one line."""
    for path, what in ((args.image, 'image'), (args.config, 'config'), (args.weights, 'weights')):
        if path is not None and not osp.exists(path):
            raise SystemExit(f'error: {what} {path!r} does not exist')
    scope = Config.fromfile(args.config).get('default_scope')
    if scope not in ('mmdet', 'mmseg'):
        raise SystemExit(f"error: config {args.config!r} has default_scope={scope!r}; expected 'mmdet' or 'mmseg'")
    return scope


def main(argv=None) -> None:
    args = parse_args(argv)
    scope = check_paths(args)
    if scope == 'mmdet':
        from mmdet.apis import DetInferencer
        inferencer = DetInferencer(args.config, args.weights, device=args.device, show_progress=False)
        inferencer(args.image, out_dir=args.out_dir, pred_score_thr=args.score_thr)
    else:
        from mmseg.apis import MMSegInferencer
        inferencer = MMSegInferencer(args.config, args.weights, device=args.device)
        inferencer(args.image, out_dir=args.out_dir)
    print(f'drawn predictions in {osp.join(args.out_dir, "vis")}')


if __name__ == '__main__':
    sys.exit(main())
