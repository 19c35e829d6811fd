"""Tile the images of a directory (e.g. the drawings of ``tools/test.py --show-dir``) into one PNG.

    python tools/misc/montage.py WORK_DIR --pattern '*/predictions/*' --out predictions.png \
        [--caption 'each pair: ground truth (left) | prediction (right)']

``--caption`` is written in a band above the tiles: mmdet's and mmseg's ``--show-dir`` drawings put
the ground truth left of the prediction, which a reader of the sheet cannot otherwise tell.
"""
import argparse
import math
from pathlib import Path

from PIL import Image, ImageDraw

CAPTION_HEIGHT = 24


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('root', type=Path)
    parser.add_argument('--pattern', default='*.png',
                        help='glob under ROOT, newest match set first')
    parser.add_argument('--out', type=Path, required=True)
    parser.add_argument('--max-images', type=int, default=16)
    parser.add_argument('--columns', type=int, default=4)
    parser.add_argument('--caption', help='a line written above the tiles')
    args = parser.parse_args(argv)
    paths = sorted(args.root.glob(args.pattern),
                   key=lambda p: (-p.stat().st_mtime, p.name))[:args.max_images]
    if not paths:
        raise SystemExit(f'error: no image matches {args.pattern!r} under {args.root}')
    images = [Image.open(p).convert('RGB') for p in sorted(paths)]
    width = max(im.width for im in images)
    height = max(im.height for im in images)
    rows = math.ceil(len(images) / args.columns)
    top = CAPTION_HEIGHT if args.caption else 0
    sheet = Image.new('RGB', (args.columns * width, top + rows * height), 'white')
    if args.caption:
        ImageDraw.Draw(sheet).text((6, 6), args.caption, fill='black')
    for index, image in enumerate(images):
        sheet.paste(image, ((index % args.columns) * width, top + (index // args.columns) * height))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(args.out)
    print(f'wrote {args.out} ({len(images)} images)')


if __name__ == '__main__':
    main()
