"""Write the embedded synthetic "shapes" dataset in the on-disk layouts of COCO, Cityscapes, ADE20K and ImageNet.

    python -m mmvisattn.utils.demo_data --out data/shapes    # = python tools/misc/make_demo_data.py

Every image is a textured background with one to three non-overlapping circles, rectangles and
triangles, each a polygon that paints the image, the masks and the COCO ``segmentation``, so masks are
exact. Output (``--out DIR``)::

    DIR/coco/{train2017,val2017}/*.jpg, DIR/coco/annotations/instances_{train,val}2017.json
    DIR/cityscapes/leftImg8bit/{train,val}/shapes/*_leftImg8bit.png
    DIR/cityscapes/gtFine/{train,val}/shapes/*_gtFine_labelTrainIds.png   (0 background, 1-3 shapes)
    DIR/ade20k/ADEChallengeData2016/{images,annotations}/{training,validation}/*   (1 background, 2-4 shapes;
                                                                           0 is ADE's "other")
    DIR/imagenet/{train,val}/{circle,rectangle,triangle}/*.jpg   (one shape an image, classes balanced)

The classification split has CLASSIFICATION_SCALE times as many images at half the side, from a random
stream of its own. The output is a pure function of the arguments, written into ``.NAME.partial`` and
renamed into place (a killed run leaves ``--out`` as it was); the marker ``.mmvisattn-demo-data`` lists
every file a run wrote, and a later run replaces exactly those, never through a symbolic link. An
``--out`` that is a file, a link or a folder the script did not write is refused in one line."""
import argparse
import json
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import numpy as np
from PIL import Image, ImageDraw

CLASSES = ('circle', 'rectangle', 'triangle')
MARKER = '.mmvisattn-demo-data'
PARTIAL_MARKER = '.mmvisattn-demo-data-partial'
LAYOUTS = ('coco', 'cityscapes', 'ade20k', 'imagenet')
CLASSIFICATION_SCALE = 4
BACKGROUND_NOISE = 12  # the standard deviation of the backgrounds' fine noise, in grey levels
CLASSIFICATION_NOISE = 4  # the classification images': shapes, not noise, to learn
Polygon = List[Tuple[float, float]]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out', required=True, type=Path, help='output directory')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--num-train', type=int, default=300)
    parser.add_argument('--num-val', type=int, default=50)
    parser.add_argument('--size', type=int, default=128, help='side of the square images (their height with '
                        '--width), pixels')
    parser.add_argument('--width', type=int, help='width of the images, pixels (default: --size)')
    args = parser.parse_args(argv)
    for name in ('num_train', 'num_val'):
        if getattr(args, name) < 1:
            parser.error(f'--{name.replace("_", "-")} must be at least 1, got {getattr(args, name)}')
    for name in ('size', 'width'):
        if getattr(args, name) is not None and getattr(args, name) < 64:
            parser.error(f'--{name} must be at least 64 pixels, got {getattr(args, name)}')
    return args


def textured_background(rng: np.random.RandomState, height: int, width: int,
                        noise_std: float = BACKGROUND_NOISE) -> np.ndarray:
    """A smooth random colour field plus fine noise, so that shapes are not found by colour alone."""
    coarse = rng.uniform(40, 215, size=(4, 4, 3)).astype(np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC), dtype=np.float32)
    noise = rng.normal(0, noise_std, size=(height, width, 3))
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


def sample_scene(rng: np.random.RandomState, height: int, width: int) -> List[Tuple[int, Polygon]]:
    """One to three shapes whose bounding discs neither overlap nor leave the image."""
    shapes, discs = [], []
    for _ in range(rng.randint(1, 4)):
        for _attempt in range(50):
            radius = rng.uniform(0.09, 0.2) * min(height, width)
            cx, cy = rng.uniform(radius + 1, np.array([width, height]) - radius - 1)
            if all(math.hypot(cx - x, cy - y) > radius + r + 2 for x, y, r in discs):
                discs.append((cx, cy, radius))
                label = rng.randint(len(CLASSES))
                shapes.append((label, shape_polygon(rng, label, cx, cy, radius)))
                break
    return shapes


def render(rng: np.random.RandomState, height: int, width: int, shapes,
           noise_std: float = BACKGROUND_NOISE) -> Tuple[np.ndarray, np.ndarray, List[np.ndarray]]:
    """Image, semantic map (0 background, 1.. shapes) and one binary mask per shape."""
    image = Image.fromarray(textured_background(rng, height, width, noise_std))
    semantic = Image.new('L', (width, height), 0)
    masks = []
    draw_image, draw_semantic = ImageDraw.Draw(image), ImageDraw.Draw(semantic)
    for label, polygon in shapes:
        colour = tuple(int(c) for c in rng.randint(0, 256, size=3))
        draw_image.polygon(polygon, fill=colour)
        draw_semantic.polygon(polygon, fill=label + 1)
        mask = Image.new('L', (width, height), 0)
        ImageDraw.Draw(mask).polygon(polygon, fill=1)
        masks.append(np.asarray(mask))
    return np.asarray(image), np.asarray(semantic), masks


def coco_annotation(ann_id: int, image_id: int, label: int, polygon: Polygon, mask: np.ndarray) -> Dict:
    xs, ys = [p[0] for p in polygon], [p[1] for p in polygon]
    x0, y0 = max(min(xs), 0.0), max(min(ys), 0.0)
    return dict(id=ann_id, image_id=image_id, category_id=label + 1, iscrowd=0, area=float(mask.sum()),
                bbox=[round(x0, 2), round(y0, 2), round(max(xs) - x0, 2), round(max(ys) - y0, 2)],
                segmentation=[[round(v, 2) for point in polygon for v in point]])


def sample_files(split: Dict[str, str], name: str) -> Dict[str, str]:
    """Where one sample's image and label maps go in each layout, relative to ``--out``."""
    ade = 'ade20k/ADEChallengeData2016'
    return dict(coco_image=f'coco/{split["coco"]}/{name}.jpg',
                cityscapes_image=f'cityscapes/leftImg8bit/{split["cityscapes"]}/shapes/{name}_leftImg8bit.png',
                cityscapes_label=f'cityscapes/gtFine/{split["cityscapes"]}/shapes/{name}_gtFine_labelTrainIds.png',
                ade_image=f'{ade}/images/{split["ade20k"]}/{name}.jpg',
                ade_label=f'{ade}/annotations/{split["ade20k"]}/{name}.png')


def annotation_file(split: Dict[str, str]) -> str:
    return f'coco/annotations/instances_{split["coco"]}.json'


def sample_name(image_id: int) -> str:
    return f'shapes_{image_id:06d}'


def write_split(out: Path, split: Dict[str, str], count: int, first_id: int, rng, height: int, width: int) -> None:
    coco_images, coco_anns = [], []
    for image_id in range(first_id, first_id + count):
        name = sample_name(image_id)
        shapes = sample_scene(rng, height, width)
        image, semantic, masks = render(rng, height, width, shapes)
        files = sample_files(split, name)
        Image.fromarray(image).save(out / files['coco_image'], quality=95)
        coco_images.append(dict(id=image_id, file_name=f'{name}.jpg', height=height, width=width))
        for (label, polygon), mask in zip(shapes, masks):
            coco_anns.append(coco_annotation(len(coco_anns) + 1, image_id, label, polygon, mask))
        Image.fromarray(image).save(out / files['cityscapes_image'])
        Image.fromarray(semantic).save(out / files['cityscapes_label'])
        Image.fromarray(image).save(out / files['ade_image'], quality=95)
        Image.fromarray(semantic + 1).save(out / files['ade_label'])
    categories = [dict(id=i + 1, name=name, supercategory='shape') for i, name in enumerate(CLASSES)]
    (out / annotation_file(split)).write_text(
        json.dumps(dict(images=coco_images, annotations=coco_anns, categories=categories)))


SPLITS = (dict(coco='train2017', cityscapes='train', ade20k='training', imagenet='train'),
          dict(coco='val2017', cityscapes='val', ade20k='validation', imagenet='val'))


def classification_label(image_id: int) -> int:
    """The class of a classification image: the ids take the classes in turn."""
    return image_id % len(CLASSES)


def classification_file(split: Dict[str, str], image_id: int) -> str:
    """Where one classification image goes: its class is its folder."""
    return f'imagenet/{split["imagenet"]}/{CLASSES[classification_label(image_id)]}/{sample_name(image_id)}.jpg'


def write_classification_split(out: Path, split: Dict[str, str], count: int, first_id: int, rng, height: int,
                               width: int) -> None:
    """One large shape of the image's class, of a random size, place and colour, on a background of finer
    noise than the other layouts'."""
    for image_id in range(first_id, first_id + count):
        label = classification_label(image_id)
        radius = rng.uniform(0.25, 0.45) * min(height, width)
        cx, cy = rng.uniform(radius + 1, np.array([width, height]) - radius - 1)
        image, _, _ = render(rng, height, width, [(label, shape_polygon(rng, label, cx, cy, radius))],
                             noise_std=CLASSIFICATION_NOISE)
        Image.fromarray(image).save(out / classification_file(split, image_id), quality=95)


def planned_files(settings: Dict) -> List[str]:
    """Every file a run with ``settings`` writes, relative to ``--out``: names depend on the
    settings alone, so the plan of an earlier run is known from its marker too."""
    files = []
    first_ids = (1, settings['num_train'] + 1)
    for split, first_id, count in zip(SPLITS, first_ids, (settings['num_train'], settings['num_val'])):
        files.append(annotation_file(split))
        for image_id in range(first_id, first_id + count):
            files += sample_files(split, sample_name(image_id)).values()
    counts = [CLASSIFICATION_SCALE * settings[name] for name in ('num_train', 'num_val')]
    for split, first_id, count in zip(SPLITS, (1, counts[0] + 1), counts):
        files += [classification_file(split, image_id) for image_id in range(first_id, first_id + count)]
    return files


def refuse(message: str) -> None:
    sys.exit(f'make_demo_data: refusing to write {message}')


def earlier_run(out: Path) -> Optional[Dict]:
    """The marker of the run that wrote ``out`` (settings and files), None for a new or empty
    folder; refuses a file, a symlink or a non-empty folder this script did not write."""
    if out.is_symlink():
        refuse(f'into {out}: it is a symbolic link; pass the folder it points to, or a new one')
    if out.exists() and not out.is_dir():
        refuse(f'into {out}: it is a file, not a folder')
    if not out.exists() or not any(out.iterdir()):
        return None
    marker = out / MARKER
    if not marker.is_file() or marker.is_symlink():
        refuse(f'into {out}: it is not empty and was not created by this script (no {MARKER} file); '
               'pass an empty or new folder')
    try:
        content = json.loads(marker.read_text())
        settings = content.get('settings', content)  # version 1 markers hold the settings alone
        return dict(settings=settings, files=content.get('files') or planned_files(settings))
    except (ValueError, KeyError, TypeError, AttributeError):
        refuse(f'into {out}: its marker {marker} is not one this script writes')


def check_no_links_or_foreign_files(out: Path, ours: Set[str], planned: List[str]) -> None:
    """Refuse before writing anything when a path this run writes or replaces passes through a
    symbolic link (it would write or delete outside ``out``) or is a file this script did not write."""
    for relative in sorted(ours | set(planned)):
        parts = Path(relative).parts
        for depth in range(1, len(parts) + 1):
            path = out.joinpath(*parts[:depth])
            if path.is_symlink():
                refuse(f'{relative} under {out}: {path} is a symbolic link (to {os.readlink(path)}) this script '
                       'did not create; move it away or pass another --out')
    foreign = [name for name in planned if name not in ours and (out / name).exists()]
    if foreign:
        refuse(f'{foreign[0]} under {out}: the file exists and was not written by this script')


def user_entries(root: Path, ours: Set[str]) -> List[str]:
    """Files, links and empty folders under ``root`` that this script did not write."""
    entries = []
    for directory, folders, files in os.walk(root):
        relative_dir = Path(directory).relative_to(root)
        links = [name for name in folders if (Path(directory) / name).is_symlink()]
        for name in files + links:
            relative = (relative_dir / name).as_posix()
            if relative not in ours and relative != MARKER:
                entries.append(relative)
        if not folders and not files and directory != str(root):
            entries.append(relative_dir.as_posix() + '/')
    return entries


def staging_paths(out: Path) -> Tuple[Path, Path]:
    """The sibling folders a run writes into (``partial``) and moves the old generation to."""
    return out.parent / f'.{out.name}.partial', out.parent / f'.{out.name}.replaced'


def finish_interrupted_run(out: Path) -> None:
    """Undo or complete what a killed run left beside ``out``: a half-written staging folder is
    removed; a replaced generation is put back when the new one never arrived, otherwise its
    user files are moved into the new one and its own files deleted."""
    partial, replaced = staging_paths(out)
    if partial.is_dir() and not partial.is_symlink():
        if any(partial.iterdir()) and not any((partial / name).is_file() for name in (PARTIAL_MARKER, MARKER)):
            refuse(f'into {partial}: it exists and was not created by this script')
        shutil.rmtree(partial)
    elif partial.exists() or partial.is_symlink():
        refuse(f'into {partial}: it exists and was not created by this script')
    if replaced.exists():
        if not out.exists():
            replaced.rename(out)
        else:
            retire(replaced, out)


def retire(old: Path, new: Path) -> None:
    """Move the user's entries from the old generation ``old`` into ``new``, then delete only the
    files the old marker lists and the folders left empty."""
    ours = set(earlier_run(old)['files'])
    check_no_links_or_foreign_files(old, ours, [])
    for relative in user_entries(old, ours):
        target = new / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if relative.endswith('/'):
            target.mkdir(exist_ok=True)
        else:
            (old / relative).rename(target)
    for relative in ours:
        (old / relative).unlink(missing_ok=True)
    (old / MARKER).unlink()
    for directory, _, _ in sorted(os.walk(old), key=lambda entry: -len(entry[0])):
        Path(directory).rmdir()


def generate(staging: Path, args: argparse.Namespace, settings: Dict, files: List[str]) -> None:
    staging.mkdir()
    (staging / PARTIAL_MARKER).write_text('written by make_demo_data.py; removed by its next run\n')
    for name in files:
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(args.seed)
    width = args.width or args.size
    write_split(staging, SPLITS[0], args.num_train, 1, rng, args.size, width)
    write_split(staging, SPLITS[1], args.num_val, args.num_train + 1, rng, args.size, width)
    rng = np.random.RandomState([args.seed, 1])  # a stream of its own: the layouts above stay as they were
    num_train, num_val = CLASSIFICATION_SCALE * args.num_train, CLASSIFICATION_SCALE * args.num_val
    height, width = args.size // 2, width // 2
    write_classification_split(staging, SPLITS[0], num_train, 1, rng, height, width)
    write_classification_split(staging, SPLITS[1], num_val, num_train + 1, rng, height, width)
    (staging / MARKER).write_text(json.dumps(dict(settings=settings, files=files)))
    (staging / PARTIAL_MARKER).unlink()


def install(staging: Path, out: Path, replaces_earlier_run: bool) -> None:
    """Rename the finished ``staging`` folder into place; the earlier generation, if any, is
    renamed aside first and retired (the user's files in it move over) afterwards."""
    _, replaced = staging_paths(out)
    if replaces_earlier_run:
        out.rename(replaced)
    elif out.exists():
        out.rmdir()  # empty: earlier_run() returned None
    staging.rename(out)
    if replaces_earlier_run:
        retire(replaced, out)


def main(argv=None) -> None:
    args = parse_args(argv)
    settings = dict(seed=args.seed, num_train=args.num_train, num_val=args.num_val, size=args.size, version=1)
    if args.width not in (None, args.size):  # square data keeps the settings (and marker) it always had
        settings['width'] = args.width
    out = args.out.absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    finish_interrupted_run(out)
    earlier = earlier_run(out)
    files = planned_files(settings)
    if earlier and earlier['settings'] == settings and all((out / name).is_file() for name in files):
        print(f'{args.out} already holds the shapes demo data for {settings}')
        return
    check_no_links_or_foreign_files(out, set(earlier['files']) if earlier else set(), files)
    staging, _ = staging_paths(out)
    generate(staging, args, settings, files)
    install(staging, out, replaces_earlier_run=earlier is not None)
    print(f'wrote {args.num_train} train + {args.num_val} val shapes images ({args.width or args.size}x{args.size}) '
          f'in COCO, Cityscapes, ADE20K and ImageNet layouts under {args.out}')


if __name__ == '__main__':
    main()
