"""Bad datasets through tools/train.py: one line naming the file or folder, and annotations the
dataset drops are reported instead of training without them in silence."""
import json

from ..conftest import run_tool
from .conftest import DET_DEMO, ONE_ITERATION, SEG_DEMO, fails_in_one_line

COCO_TRAIN = 'data/shapes/coco/annotations/instances_train2017.json'


def train_fails(small_data, config=DET_DEMO) -> str:
    return fails_in_one_line(['tools/train.py', config, '--work-dir', small_data / 'work',
                              *ONE_ITERATION],
                             small_data, small_data / 'work')


def test_missing_annotation_file_is_named(small_data):
    (small_data / COCO_TRAIN).unlink()
    assert (
        train_fails(small_data)
        == f"error: train_dataloader.dataset.ann_file '{COCO_TRAIN}' does not exist"
    )


def test_missing_image_folder_is_named(small_data):
    for image in (small_data / 'data/shapes/cityscapes/leftImg8bit/val/shapes').iterdir():
        image.unlink()
    (small_data / 'data/shapes/cityscapes/leftImg8bit/val/shapes').rmdir()
    (small_data / 'data/shapes/cityscapes/leftImg8bit/val').rmdir()
    assert train_fails(small_data, SEG_DEMO) == (
        "error: val_dataloader.dataset.data_prefix.img_path folder "
        "'data/shapes/cityscapes/leftImg8bit/val' does not exist")


def test_empty_dataset_is_named(small_data):
    path = small_data / COCO_TRAIN
    content = json.loads(path.read_text())
    path.write_text(json.dumps(dict(content, images=[], annotations=[])))
    line = train_fails(small_data)
    assert (
        line.startswith('error: train_dataloader.dataset holds no samples')
        and 'instances_train2017.json' in line
    )


def test_undecodable_image_is_named(small_data):
    image = small_data / 'data/shapes/coco/train2017/shapes_000001.jpg'
    image.write_text('not a jpeg')
    # every image is read
    options = ['train_cfg.max_iters=4', 'train_dataloader.sampler.shuffle=False']
    line = fails_in_one_line(['tools/train.py', DET_DEMO, '--work-dir', small_data / 'work',
                              *ONE_ITERATION, *options], small_data, small_data / 'work')
    assert (line == f"error: image '{image.relative_to(small_data)}' cannot be decoded (not an "
            "image file, or damaged)")


def test_undecodable_label_map_is_named(small_data):
    label_map = (
        small_data
        / 'data/shapes/cityscapes/gtFine/train/shapes/shapes_000001_gtFine_labelTrainIds.png'
    )
    label_map.write_text('not a png')
    options = ['train_cfg.max_iters=4', 'train_dataloader.sampler.shuffle=False']
    line = fails_in_one_line(['tools/train.py', SEG_DEMO, '--work-dir', small_data / 'work',
                              *ONE_ITERATION, *options], small_data, small_data / 'work')
    assert line == (f"error: image '{label_map.relative_to(small_data)}' cannot be decoded "
                    "(not an image file, or damaged)")


def test_dropped_annotations_are_reported(small_data):
    path = small_data / COCO_TRAIN
    content = json.loads(path.read_text())
    content['annotations'][0]['bbox'] = [500.0, 500.0, 10.0, 10.0]  # outside the 64 x 64 image
    content['annotations'][1]['bbox'][2] = 0.5  # narrower than a pixel
    path.write_text(json.dumps(content))
    done = run_tool(['tools/train.py', DET_DEMO, '--work-dir', small_data / 'work', *ONE_ITERATION],
                    cwd=small_data)
    total = len(content['annotations'])
    assert (
        f'annotations/instances_train2017.json: dropped 2 of {total} annotations while loading '
        '(1 outside the image, 1 degenerate (area <= 0 or a side under 1 px))'
    ) in done.stdout + done.stderr
