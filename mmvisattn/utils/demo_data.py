"""Write the embedded synthetic "shapes" dataset in the layouts of COCO, Cityscapes, ADE20K and
ImageNet.

    python -m mmvisattn.utils.demo_data --out data/shapes    # = python tools/misc/make_demo_data.py

Each image is a textured background with one to three non-overlapping circles, rectangles and
triangles, each a polygon that paints the image, the masks and the COCO ``segmentation`` (masks are
exact). Output::

    DIR/coco/{train2017,val2017}/*.jpg, DIR/coco/annotations/instances_{train,val}2017.json
    DIR/cityscapes/leftImg8bit/{train,val}/shapes/*_leftImg8bit.png
    DIR/cityscapes/gtFine/{train,val}/shapes/*_gtFine_labelTrainIds.png  (0 background, 1-3 shapes)
    DIR/ade20k/ADEChallengeData2016/{images,annotations}/{training,validation}/*
        (1 background, 2-4 shapes; 0 is ADE's "other")
    DIR/imagenet/{train,val}/{circle,rectangle,triangle}/*.jpg  (one shape an image, balanced)

``--standard`` writes the same scenes where and as the real datasets lie, so a real config runs on
them as it is (names, ids and void pixels: :data:`STANDARD_ROOTS`)::

    DIR/coco/{train2017,val2017}/000000000001.jpg ...
    DIR/coco/annotations/instances_{train,val}2017.json
    DIR/cityscapes/{leftImg8bit,gtFine}/{train,val}/shapes/
        shapes_000000_000001_{leftImg8bit,gtFine_labelTrainIds}.png ...
    DIR/ade/ADEChallengeData2016/{images,annotations}/{training,validation}/
        ADE_{train,val}_00000001.{jpg,png} ...

The output is a pure function of the arguments, staged in ``.NAME.partial`` and renamed into place;
the marker ``.mmvisattn-demo-data`` lists every file a run wrote, and a later run replaces exactly
those. An ``--out`` (or, with ``--standard``, a dataset root) that is a file, a link or a folder the
script did not write is refused in one line before anything is written."""
import argparse
import json
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple

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
    parser.add_argument('--standard', action='store_true',
                        help="the real datasets' layouts, names and classes: OUT/coco, "
                        "OUT/cityscapes and "
                        'OUT/ade/ADEChallengeData2016, each written on its own (a smoke test of a '
                        'real config; default 8 train and 4 val images)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--num-train', type=int, help='default 300 (8 with --standard)')
    parser.add_argument('--num-val', type=int, help='default 50 (4 with --standard)')
    parser.add_argument('--size', type=int, default=128,
                        help='side of the square images (their height with ' '--width), pixels')
    parser.add_argument('--width', type=int, help='width of the images, pixels (default: --size)')
    args = parser.parse_args(argv)
    defaults = dict(num_train=8, num_val=4) if args.standard else dict(num_train=300, num_val=50)
    for name, default in defaults.items():
        setattr(args, name, default if getattr(args, name) is None else getattr(args, name))
    for name in ('num_train', 'num_val'):
        if getattr(args, name) < 1:
            parser.error(
                f'--{name.replace("_", "-")} must be at least 1, got {getattr(args, name)}'
            )
    for name in ('size', 'width'):
        if getattr(args, name) is not None and getattr(args, name) < 64:
            parser.error(f'--{name} must be at least 64 pixels, got {getattr(args, name)}')
    return args


def textured_background(rng: np.random.RandomState, height: int, width: int,
                        noise_std: float = BACKGROUND_NOISE) -> np.ndarray:
    """A smooth random colour field plus fine noise: shapes are not found by colour alone."""
    coarse = rng.uniform(40, 215, size=(4, 4, 3)).astype(np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC),
                        dtype=np.float32)
    noise = rng.normal(0, noise_std, size=(height, width, 3))
    return np.clip(smooth + noise, 0, 255).astype(np.uint8)


def shape_polygon(rng: np.random.RandomState, label: int, cx: float, cy: float,
                  radius: float) -> Polygon:
    """Vertices of a circle (32-gon), a rotated rectangle or a rotated triangle around (cx, cy)."""
    angle = rng.uniform(0, 2 * math.pi)
    if CLASSES[label] == 'circle':
        angles = [2 * math.pi * i / 32 for i in range(32)]
        radii = [radius] * 32
    elif CLASSES[label] == 'rectangle':
        half_angle = math.atan(rng.uniform(0.5, 1.0))  # aspect ratio between 1:2 and 1:1
        angles = [angle + a for a in (half_angle, math.pi - half_angle, math.pi + half_angle,
                                      -half_angle)]
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


class Scene(NamedTuple):
    split: Dict[str, str]
    image_id: int
    shapes: List[Tuple[int, Polygon]]
    image: np.ndarray
    semantic: np.ndarray
    masks: List[np.ndarray]


def coco_annotation(ann_id: int, image_id: int, category_id: int, polygon: Polygon,
                    mask: np.ndarray) -> Dict:
    xs, ys = [p[0] for p in polygon], [p[1] for p in polygon]
    x0, y0 = max(min(xs), 0.0), max(min(ys), 0.0)
    return dict(id=ann_id, image_id=image_id, category_id=category_id, iscrowd=0,
                area=float(mask.sum()),
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
    """The split's COCO annotation file, relative to the COCO root."""
    return f'annotations/instances_{split["coco"]}.json'


def split_ids(counts: Sequence[int]) -> Iterator[Tuple[Dict[str, str], range]]:
    """Each split with its image ids (the validation ids run on from the training ones)."""
    first = 1
    for split, count in zip(SPLITS, counts):
        yield split, range(first, first + count)
        first += count


def sample_name(image_id: int) -> str:
    return f'shapes_{image_id:06d}'


def scenes(rng: np.random.RandomState, counts: Tuple[int, int], height: int,
           width: int) -> Iterator[Scene]:
    """Both splits' detection and segmentation samples, in the order they take the random stream."""
    for split, image_ids in split_ids(counts):
        for image_id in image_ids:
            shapes = sample_scene(rng, height, width)
            yield Scene(split, image_id, shapes, *render(rng, height, width, shapes))


def write_shapes_layouts(out: Path, scenes_: Iterator[Scene]) -> None:
    """The demo's layouts: every sample in COCO, Cityscapes and ADE20K under ``out``."""
    coco = {split['coco']: dict(images=[], annotations=[]) for split in SPLITS}
    for scene in scenes_:
        name = sample_name(scene.image_id)
        files = sample_files(scene.split, name)
        Image.fromarray(scene.image).save(out / files['coco_image'], quality=95)
        add_coco_sample(coco[scene.split['coco']], scene, f'{name}.jpg', lambda label: label + 1)
        Image.fromarray(scene.image).save(out / files['cityscapes_image'])
        Image.fromarray(scene.semantic).save(out / files['cityscapes_label'])
        Image.fromarray(scene.image).save(out / files['ade_image'], quality=95)
        Image.fromarray(scene.semantic + 1).save(out / files['ade_label'])
    categories = [
        dict(id=i + 1, name=name, supercategory='shape') for i, name in enumerate(CLASSES)
    ]
    write_coco_annotations(out / 'coco', coco, categories)


def write_coco_annotations(root: Path, coco: Dict[str, Dict], categories: List[Dict]) -> None:
    """Each split's images and annotations under the COCO root ``root``."""
    for split in SPLITS:
        content = dict(**coco[split['coco']], categories=categories)
        (root / annotation_file(split)).write_text(json.dumps(content))


def add_coco_sample(content: Dict, scene: Scene, file_name: str,
                    category_id: Callable[[int], int]) -> None:
    height, width = scene.semantic.shape
    content['images'].append(dict(id=scene.image_id, file_name=file_name, height=height,
                                  width=width))
    for (label, polygon), mask in zip(scene.shapes, scene.masks):
        content['annotations'].append(coco_annotation(len(content['annotations']) + 1,
                                                      scene.image_id,
                                                      category_id(label), polygon, mask))


SPLITS = (dict(coco='train2017', cityscapes='train', ade20k='training', imagenet='train'),
          dict(coco='val2017', cityscapes='val', ade20k='validation', imagenet='val'))


def classification_label(image_id: int) -> int:
    """The class of a classification image: the ids take the classes in turn."""
    return image_id % len(CLASSES)


def classification_file(split: Dict[str, str], image_id: int) -> str:
    """Where one classification image goes: its class is its folder."""
    label = CLASSES[classification_label(image_id)]
    return f'imagenet/{split["imagenet"]}/{label}/{sample_name(image_id)}.jpg'


def write_classification_split(out: Path, split: Dict[str, str], image_ids: range, rng, height: int,
                               width: int) -> None:
    """One large shape of the image's class, of random size, place and colour, on finer noise."""
    for image_id in image_ids:
        label = classification_label(image_id)
        radius = rng.uniform(0.25, 0.45) * min(height, width)
        cx, cy = rng.uniform(radius + 1, np.array([width, height]) - radius - 1)
        image, _, _ = render(rng, height, width,
                             [(label, shape_polygon(rng, label, cx, cy, radius))],
                             noise_std=CLASSIFICATION_NOISE)
        Image.fromarray(image).save(out / classification_file(split, image_id), quality=95)


# --standard: each dataset's own root, file names and classes. The shapes take the first classes
# (COCO ids 1-3; Cityscapes train ids 1-3 on road, 0; ADE20K 2-4 on wall, 1); each shape's outline
# is void (Cityscapes 255, ADE20K 0, reduced to 255), so the ignore index is exercised too.
STANDARD_ROOTS = dict(coco='coco', cityscapes='cityscapes', ade20k='ade/ADEChallengeData2016')
# COCO numbers its 80 categories 1-90 with gaps
COCO_MISSING_IDS = (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)
VOID = dict(cityscapes=255, ade20k=0)
VOID_WIDTH = 2  # pixels


def standard_sample_files(layout: str, split: Dict[str, str], image_id: int) -> Dict[str, str]:
    """One sample's image (and label map) in a real dataset's root, named as the dataset does."""
    if layout == 'coco':
        return dict(image=f'{split["coco"]}/{image_id:012d}.jpg')
    if layout == 'cityscapes':
        # {city}_{sequence}_{frame}
        folder, stem = split['cityscapes'], f'shapes_000000_{image_id:06d}'
        return dict(image=f'leftImg8bit/{folder}/shapes/{stem}_leftImg8bit.png',
                    label=f'gtFine/{folder}/shapes/{stem}_gtFine_labelTrainIds.png')
    folder = split['ade20k']
    stem = f'ADE_{"train" if folder == "training" else "val"}_{image_id:08d}'
    return dict(image=f'images/{folder}/{stem}.jpg', label=f'annotations/{folder}/{stem}.png')


def standard_files(layout: str, settings: Dict) -> List[str]:
    """Every file ``--standard`` writes in ``layout``'s root."""
    files = [annotation_file(split) for split in SPLITS] if layout == 'coco' else []
    for split, image_ids in split_ids((settings['num_train'], settings['num_val'])):
        for image_id in image_ids:
            files += standard_sample_files(layout, split, image_id).values()
    return files


def coco_categories() -> Tuple[List[Dict], List[int]]:
    """COCO's 80 categories with their ids (mmdet's CocoDataset names) and the shapes' ids."""
    from mmdet.datasets import CocoDataset
    ids = [i for i in range(1, 91) if i not in COCO_MISSING_IDS]
    names = CocoDataset.METAINFO['classes']
    return [dict(id=i, name=name, supercategory='') for i, name in zip(ids, names)], ids[
        : len(CLASSES)
    ]


def with_void_outlines(labels: np.ndarray, shapes: List[Tuple[int, Polygon]],
                       void: int) -> Image.Image:
    image = Image.fromarray(labels)
    draw = ImageDraw.Draw(image)
    for _, polygon in shapes:
        draw.line(polygon + polygon[:1], fill=void, width=VOID_WIDTH)
    return image


def write_standard(out: Path, layout: str, args: argparse.Namespace) -> None:
    """The samples of both splits in ``layout``'s root ``out``; the same scenes in every layout."""
    categories, shape_ids = coco_categories() if layout == 'coco' else (None, None)
    coco = {split['coco']: dict(images=[], annotations=[]) for split in SPLITS}
    samples = scenes(np.random.RandomState(args.seed), (args.num_train, args.num_val), args.size,
                     args.width or args.size)
    for scene in samples:
        files = standard_sample_files(layout, scene.split, scene.image_id)
        Image.fromarray(scene.image).save(out / files['image'], quality=95)
        if layout == 'coco':
            add_coco_sample(coco[scene.split['coco']], scene, Path(files['image']).name,
                            shape_ids.__getitem__)
        else:
            labels = scene.semantic if layout == 'cityscapes' else scene.semantic + 1
            with_void_outlines(labels, scene.shapes, VOID[layout]).save(out / files['label'])
    if layout == 'coco':
        write_coco_annotations(out, coco, categories)


def planned_files(settings: Dict) -> List[str]:
    """Every file a run with ``settings`` writes, relative to ``--out``."""
    files = []
    for split, image_ids in split_ids((settings['num_train'], settings['num_val'])):
        files.append('coco/' + annotation_file(split))
        for image_id in image_ids:
            files += sample_files(split, sample_name(image_id)).values()
    counts = [CLASSIFICATION_SCALE * settings[name] for name in ('num_train', 'num_val')]
    for split, image_ids in split_ids(counts):
        files += [classification_file(split, image_id) for image_id in image_ids]
    return files


def refuse(message: str) -> None:
    sys.exit(f'make_demo_data: refusing to write {message}')


def earlier_run(out: Path) -> Optional[Dict]:
    """The marker of the run that wrote ``out`` (None for a new or empty folder); refuses a file, a
    symlink or a non-empty folder this script did not write."""
    if out.is_symlink():
        refuse(f'into {out}: it is a symbolic link; pass the folder it points to, or a new one')
    if out.exists() and not out.is_dir():
        refuse(f'into {out}: it is a file, not a folder')
    if not out.exists() or not any(out.iterdir()):
        return None
    marker = out / MARKER
    if not marker.is_file() or marker.is_symlink():
        refuse(f'into {out}: it is not empty and was not created by this script (no {MARKER} '
               'file); pass an empty or new folder')
    try:
        content = json.loads(marker.read_text())
        settings = content.get('settings', content)  # version 1 markers hold the settings alone
        return dict(settings=settings, files=content.get('files') or planned_files(settings))
    except (ValueError, KeyError, TypeError, AttributeError):
        refuse(f'into {out}: its marker {marker} is not one this script writes')


def check_no_links_or_foreign_files(out: Path, ours: Set[str], planned: List[str]) -> None:
    """Refuse, before writing, a path that passes through a symbolic link or is a file this script
    did not write."""
    for relative in sorted(ours | set(planned)):
        parts = Path(relative).parts
        for depth in range(1, len(parts) + 1):
            path = out.joinpath(*parts[:depth])
            if path.is_symlink():
                refuse(f'{relative} under {out}: {path} is a symbolic link (to '
                       f'{os.readlink(path)}) this script '
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
    """Undo or complete what a killed run left beside ``out``: drop a half-written staging folder;
    put a replaced generation back if the new one never arrived, else move its user files over and
    delete its own."""
    partial, replaced = staging_paths(out)
    if partial.is_dir() and not partial.is_symlink():
        if any(partial.iterdir()) and not any(
            (partial / name).is_file() for name in (PARTIAL_MARKER, MARKER)
        ):
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
    """Move the user's entries from ``old`` into ``new``, then delete the files the old marker lists
    and the folders left empty."""
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


def write_shapes(staging: Path, args: argparse.Namespace) -> None:
    """The demo's four layouts; the classification split from a random stream of its own."""
    width = args.width or args.size
    write_shapes_layouts(staging,
                         scenes(np.random.RandomState(args.seed), (args.num_train, args.num_val),
                                         args.size, width))
    rng = np.random.RandomState([args.seed, 1])
    counts = (CLASSIFICATION_SCALE * args.num_train, CLASSIFICATION_SCALE * args.num_val)
    for split, image_ids in split_ids(counts):
        write_classification_split(staging, split, image_ids, rng, args.size // 2, width // 2)


def generate(staging: Path, settings: Dict, files: List[str],
             write: Callable[[Path], None]) -> None:
    staging.mkdir()
    (staging / PARTIAL_MARKER).write_text('written by make_demo_data.py; removed by its next run\n')
    for name in files:
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
    write(staging)
    (staging / MARKER).write_text(json.dumps(dict(settings=settings, files=files)))
    (staging / PARTIAL_MARKER).unlink()


def install(staging: Path, out: Path, replaces_earlier_run: bool) -> None:
    """Rename the finished ``staging`` folder into place, retiring the earlier generation after."""
    _, replaced = staging_paths(out)
    if replaces_earlier_run:
        out.rename(replaced)
    elif out.exists():
        out.rmdir()  # empty: earlier_run() returned None
    staging.rename(out)
    if replaces_earlier_run:
        retire(replaced, out)


def checked_root(out: Path, files: List[str]) -> Optional[Dict]:
    """The marker of the run that wrote ``out`` (None for a new folder), after recovering a killed
    run and refusing what must not be replaced."""
    out.parent.mkdir(parents=True, exist_ok=True)
    finish_interrupted_run(out)
    earlier = earlier_run(out)
    check_no_links_or_foreign_files(out, set(earlier['files']) if earlier else set(), files)
    return earlier


def write_root(out: Path, settings: Dict, files: List[str], write: Callable[[Path], None]) -> bool:
    """Write ``files`` into ``out`` by ``write(staging)``, transactionally; False if there."""
    earlier = checked_root(out, files)
    if (
        earlier
        and earlier['settings'] == settings
        and all((out / name).is_file() for name in files)
    ):
        return False
    staging, _ = staging_paths(out)
    generate(staging, settings, files, write)
    install(staging, out, replaces_earlier_run=earlier is not None)
    return True


def main(argv=None) -> None:
    args = parse_args(argv)
    settings = dict(seed=args.seed, num_train=args.num_train, num_val=args.num_val, size=args.size,
                    version=1)
    # square data keeps the settings (and marker) it always had
    if args.width not in (None, args.size):
        settings['width'] = args.width
    size = f'{args.width or args.size}x{args.size}'
    if args.standard:
        roots = {
            layout: (args.out.absolute() / root, dict(settings, layout=layout))
            for layout, root in STANDARD_ROOTS.items()
        }
        # every root refused before any is written
        for layout, (out, layout_settings) in roots.items():
            checked_root(out, standard_files(layout, layout_settings))
        for layout, (out, layout_settings) in roots.items():
            written = write_root(out, layout_settings, standard_files(layout, layout_settings),
                                 lambda staging,
                                 layout=layout: write_standard(staging, layout, args))
            print(f'{"wrote" if written else "kept"} {args.num_train} train + {args.num_val} val '
                  f'images ({size}) '
                  f"in {layout}'s layout under {out}")
    elif write_root(args.out.absolute(), settings, planned_files(settings),
                    lambda staging: write_shapes(staging, args)):
        print(f'wrote {args.num_train} train + {args.num_val} val shapes images ({size}) '
              f'in COCO, Cityscapes, ADE20K and ImageNet layouts under {args.out}')
    else:
        print(f'{args.out} already holds the shapes demo data for {settings}')


if __name__ == '__main__':
    main()
