"""Write the embedded synthetic "shapes" dataset in the on-disk layouts of COCO, Cityscapes and ADE20K.

Every image is a textured background with one to three non-overlapping circles, rectangles and
triangles. Each shape is a polygon: the same polygon paints the image, the instance mask, the
semantic maps and the COCO ``segmentation`` entry, so masks are exact. Output (``--out DIR``)::

    DIR/coco/{train2017,val2017}/*.jpg, DIR/coco/annotations/instances_{train,val}2017.json
    DIR/cityscapes/leftImg8bit/{train,val}/shapes/*_leftImg8bit.png
    DIR/cityscapes/gtFine/{train,val}/shapes/*_gtFine_labelTrainIds.png   (0 background, 1-3 shapes)
    DIR/ade20k/ADEChallengeData2016/{images,annotations}/{training,validation}/*   (1 background, 2-4 shapes;
                                                                           0 is ADE's "other")

The output is a pure function of the arguments. The script refuses a non-empty directory that it
did not create; a directory it did create is rewritten when the arguments change and left alone
when they do not.
"""
import argparse
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
from PIL import Image, ImageDraw

CLASSES = ('circle', 'rectangle', 'triangle')
MARKER = '.mmvisattn-demo-data'
LAYOUTS = ('coco', 'cityscapes', 'ade20k')
Polygon = List[Tuple[float, float]]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out', required=True, type=Path, help='output directory')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--num-train', type=int, default=300)
    parser.add_argument('--num-val', type=int, default=50)
    parser.add_argument('--size', type=int, default=128, help='side of the square images, pixels')
    args = parser.parse_args(argv)
    for name in ('num_train', 'num_val'):
        if getattr(args, name) < 1:
            parser.error(f'--{name.replace("_", "-")} must be at least 1, got {getattr(args, name)}')
    if args.size < 64:
        parser.error(f'--size must be at least 64 pixels, got {args.size}')
    return args


def textured_background(rng: np.random.RandomState, size: int) -> np.ndarray:
    """A smooth random colour field plus fine noise, so that shapes are not found by colour alone."""
    coarse = rng.uniform(40, 215, size=(4, 4, 3)).astype(np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize((size, size), Image.BICUBIC), dtype=np.float32)
    noise = rng.normal(0, 12, size=(size, size, 3))
    return np.clip(smooth + noise, 0, 255).astype(np.uint8)


def shape_polygon(rng: np.random.RandomState, label: int, cx: float, cy: float, radius: float) -> Polygon:
    """Vertices of a circle (32-gon), a rotated rectangle or a rotated triangle around (cx, cy)."""
    angle = rng.uniform(0, 2 * math.pi)
    if CLASSES[label] == 'circle':
        angles = [2 * math.pi * i / 32 for i in range(32)]
        radii = [radius] * 32
    elif CLASSES[label] == 'rectangle':
        half_angle = math.atan(rng.uniform(0.5, 1.0))  # aspect ratio between 1:2 and 1:1
        angles = [angle + a for a in (half_angle, math.pi - half_angle, math.pi + half_angle, -half_angle)]
        radii = [radius] * 4
    else:
        angles = [angle + 2 * math.pi * i / 3 for i in range(3)]
        radii = [radius] * 3
    return [(cx + r * math.cos(a), cy + r * math.sin(a)) for a, r in zip(angles, radii)]


def sample_scene(rng: np.random.RandomState, size: int) -> List[Tuple[int, Polygon]]:
    """One to three shapes whose bounding discs neither overlap nor leave the image."""
    shapes, discs = [], []
    for _ in range(rng.randint(1, 4)):
        for _attempt in range(50):
            radius = rng.uniform(0.09, 0.2) * size
            cx, cy = rng.uniform(radius + 1, size - radius - 1, size=2)
            if all(math.hypot(cx - x, cy - y) > radius + r + 2 for x, y, r in discs):
                discs.append((cx, cy, radius))
                label = rng.randint(len(CLASSES))
                shapes.append((label, shape_polygon(rng, label, cx, cy, radius)))
                break
    return shapes


def render(rng: np.random.RandomState, size: int, shapes) -> Tuple[np.ndarray, np.ndarray, List[np.ndarray]]:
    """Image, semantic map (0 background, 1.. shapes) and one binary mask per shape."""
    image = Image.fromarray(textured_background(rng, size))
    semantic = Image.new('L', (size, size), 0)
    masks = []
    draw_image, draw_semantic = ImageDraw.Draw(image), ImageDraw.Draw(semantic)
    for label, polygon in shapes:
        colour = tuple(int(c) for c in rng.randint(0, 256, size=3))
        draw_image.polygon(polygon, fill=colour)
        draw_semantic.polygon(polygon, fill=label + 1)
        mask = Image.new('L', (size, size), 0)
        ImageDraw.Draw(mask).polygon(polygon, fill=1)
        masks.append(np.asarray(mask))
    return np.asarray(image), np.asarray(semantic), masks


def coco_annotation(ann_id: int, image_id: int, label: int, polygon: Polygon, mask: np.ndarray) -> Dict:
    xs, ys = [p[0] for p in polygon], [p[1] for p in polygon]
    x0, y0 = max(min(xs), 0.0), max(min(ys), 0.0)
    return dict(id=ann_id, image_id=image_id, category_id=label + 1, iscrowd=0, area=float(mask.sum()),
                bbox=[round(x0, 2), round(y0, 2), round(max(xs) - x0, 2), round(max(ys) - y0, 2)],
                segmentation=[[round(v, 2) for point in polygon for v in point]])


def write_split(out: Path, split: Dict[str, str], count: int, first_id: int, rng, size: int) -> None:
    coco_images, coco_anns = [], []
    for image_id in range(first_id, first_id + count):
        name = f'shapes_{image_id:06d}'
        shapes = sample_scene(rng, size)
        image, semantic, masks = render(rng, size, shapes)
        Image.fromarray(image).save(out / 'coco' / split['coco'] / f'{name}.jpg', quality=95)
        coco_images.append(dict(id=image_id, file_name=f'{name}.jpg', height=size, width=size))
        for (label, polygon), mask in zip(shapes, masks):
            coco_anns.append(coco_annotation(len(coco_anns) + 1, image_id, label, polygon, mask))
        city = out / 'cityscapes'
        Image.fromarray(image).save(city / 'leftImg8bit' / split['cityscapes'] / 'shapes' / f'{name}_leftImg8bit.png')
        Image.fromarray(semantic).save(
            city / 'gtFine' / split['cityscapes'] / 'shapes' / f'{name}_gtFine_labelTrainIds.png')
        ade = out / 'ade20k' / 'ADEChallengeData2016'
        Image.fromarray(image).save(ade / 'images' / split['ade20k'] / f'{name}.jpg', quality=95)
        Image.fromarray(semantic + 1).save(ade / 'annotations' / split['ade20k'] / f'{name}.png')
    categories = [dict(id=i + 1, name=name, supercategory='shape') for i, name in enumerate(CLASSES)]
    ann_file = out / 'coco' / 'annotations' / f'instances_{split["coco"]}.json'
    ann_file.write_text(json.dumps(dict(images=coco_images, annotations=coco_anns, categories=categories)))


SPLITS = (dict(coco='train2017', cityscapes='train', ade20k='training'),
          dict(coco='val2017', cityscapes='val', ade20k='validation'))


def prepare_output(out: Path, settings: Dict) -> bool:
    """Make ``out`` ready; returns False when it already holds this exact dataset."""
    marker = out / MARKER
    if out.exists() and any(out.iterdir()):
        if not marker.exists():
            sys.exit(f'make_demo_data: refusing to write into {out}: it is not empty and was not created by '
                     f'this script (no {MARKER} file); pass an empty or new directory')
        if json.loads(marker.read_text()) == settings:
            return False
        for layout in LAYOUTS:
            shutil.rmtree(out / layout, ignore_errors=True)
    for split in SPLITS:
        for directory in (f'coco/{split["coco"]}', 'coco/annotations',
                          f'cityscapes/leftImg8bit/{split["cityscapes"]}/shapes',
                          f'cityscapes/gtFine/{split["cityscapes"]}/shapes',
                          f'ade20k/ADEChallengeData2016/images/{split["ade20k"]}',
                          f'ade20k/ADEChallengeData2016/annotations/{split["ade20k"]}'):
            (out / directory).mkdir(parents=True, exist_ok=True)
    return True


def main(argv=None) -> None:
    args = parse_args(argv)
    settings = dict(seed=args.seed, num_train=args.num_train, num_val=args.num_val, size=args.size, version=1)
    if not prepare_output(args.out, settings):
        print(f'{args.out} already holds the shapes demo data for {settings}')
        return
    rng = np.random.RandomState(args.seed)
    write_split(args.out, SPLITS[0], args.num_train, 1, rng, args.size)
    write_split(args.out, SPLITS[1], args.num_val, args.num_train + 1, rng, args.size)
    (args.out / MARKER).write_text(json.dumps(settings))
    print(f'wrote {args.num_train} train + {args.num_val} val shapes images ({args.size}x{args.size}) '
          f'in COCO, Cityscapes and ADE20K layouts under {args.out}')


if __name__ == '__main__':
    main()
