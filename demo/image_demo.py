"""Predict on images with any config of the project and draw the predictions.

    python demo/image_demo.py IMAGE CONFIG [--weights CKPT] [--out-dir DIR] [--device cpu]
    [--score-thr 0.3]

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

import mmvisattn  # noqa: F401  (registers the project's models in mmdet and mmseg)
from mmvisattn.launch import load_config, read_run_checkpoint


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('image', help='an image file or a folder of images')
    parser.add_argument('config')
    parser.add_argument('--weights', help='checkpoint (default: none, the model as initialised)')
    parser.add_argument('--out-dir', default='outputs', help='the drawn images go to OUT_DIR/vis/')
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--score-thr', type=float, default=0.3,
                        help='detection: smallest score drawn')
    return parser.parse_args(argv)


def check_inputs(args: argparse.Namespace) -> str:
    """The config's scope, after the checks ``tools/test.py`` makes: the image exists, the config
    loads without a mistake, the weights are a readable checkpoint; each fault is named in one
    line."""
    if not osp.exists(args.image):
        raise SystemExit(f'error: image {args.image!r} does not exist')
    cfg = load_config(args.config)
    if args.weights is not None:
        if not osp.isfile(args.weights):
            raise SystemExit(f'error: weights {args.weights!r} does not exist')
        read_run_checkpoint(args.weights)  # a damaged file ends here, not in torch.load's advice
    return cfg.default_scope


def main(argv=None) -> None:
    args = parse_args(argv)
    scope = check_inputs(args)
    if scope == 'mmdet':
        from mmdet.apis import DetInferencer
        inferencer = DetInferencer(args.config, args.weights, device=args.device,
                                   show_progress=False)
        inferencer(args.image, out_dir=args.out_dir, pred_score_thr=args.score_thr)
    else:
        from mmseg.apis import MMSegInferencer
        inferencer = MMSegInferencer(args.config, args.weights, device=args.device)
        inferencer(args.image, out_dir=args.out_dir)
    print(f'drawn predictions in {osp.join(args.out_dir, "vis")}')


if __name__ == '__main__':
    sys.exit(main())
