"""The shapes data: deterministic, transactional (a killed run changes nothing), never writes or
deletes outside ``--out`` or a file it did not write, and is read unchanged by the stock COCO,
Cityscapes and ADE20K dataset classes with exact masks."""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from ..conftest import REPO, run_tool, tool_env

SMALL = ['--num-train', 4, '--num-val', 2, '--size', 64]


def tree_digest(root):
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob('*') if p.is_file()):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def test_deterministic_and_idempotent(tmp_path):
    args = ['--num-train', 6, '--num-val', 3, '--size', 64, '--seed', 3]
    run_tool(['tools/misc/make_demo_data.py', '--out', tmp_path / 'a', *args], cwd=tmp_path)
    run_tool(['tools/misc/make_demo_data.py', '--out', tmp_path / 'b', *args], cwd=tmp_path)
    assert tree_digest(tmp_path / 'a') == tree_digest(tmp_path / 'b')
    again = run_tool(['tools/misc/make_demo_data.py', '--out', tmp_path / 'a', *args], cwd=tmp_path)
    assert 'already holds' in again.stdout
    run_tool(['tools/misc/make_demo_data.py', '--out', tmp_path / 'a', *args[:-1], 4], cwd=tmp_path)
    assert tree_digest(tmp_path / 'a') != tree_digest(tmp_path / 'b')


def test_refuses_foreign_non_empty_directory(tmp_path):
    (tmp_path / 'precious.txt').write_text('keep me')
    done = run_tool(['tools/misc/make_demo_data.py', '--out', tmp_path], cwd=tmp_path, check=False)
    assert done.returncode != 0
    assert f'refusing to write into {tmp_path}' in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ['precious.txt']


def make(out, *args, check=True):
    return run_tool(['tools/misc/make_demo_data.py', '--out', out, *args], cwd=out.parent,
                    check=check)


def one_line_refusal(done, *fragments):
    assert done.returncode == 1 and 'Traceback' not in done.stderr
    line, = done.stderr.strip().splitlines()
    assert line.startswith('make_demo_data: refusing to write'), line
    assert all(str(fragment) in line for fragment in fragments), line


def test_symlinked_layout_folder_is_refused_and_its_target_untouched(tmp_path):
    """``data/shapes/coco`` linked to a real COCO folder: regenerating must not write through it."""
    out = tmp_path / 'shapes'
    make(out, *SMALL)
    real = tmp_path / 'real_coco'
    (real / 'annotations').mkdir(parents=True)
    (real / 'annotations' / 'instances_train2017.json').write_text('{"the": "real one"}')
    (real / 'train2017').mkdir()
    (real / 'train2017' / 'real.jpg').write_bytes(b'jpeg')
    digest = tree_digest(real)
    os.rename(out / 'coco', tmp_path / 'old_coco')
    (out / 'coco').symlink_to(real)
    one_line_refusal(make(out, '--num-train', 5, '--num-val', 2, '--size', 64, check=False),
                     out / 'coco', real)
    assert tree_digest(real) == digest
    assert (out / 'coco').is_symlink()


def test_regenerating_keeps_the_users_files(tmp_path):
    out = tmp_path / 'shapes'
    make(out, *SMALL)
    (out / 'coco' / 'annotations' / 'my_extra.json').write_text('mine')
    (out / 'notes').mkdir()
    (out / 'notes' / 'readme.txt').write_text('also mine')
    make(out, '--num-train', 3, '--num-val', 2, '--size', 64)
    assert (out / 'coco' / 'annotations' / 'my_extra.json').read_text() == 'mine'
    assert (out / 'notes' / 'readme.txt').read_text() == 'also mine'
    assert sorted(p.name for p in (out / 'coco' / 'train2017').iterdir()) == [
        f'shapes_00000{i}.jpg' for i in (1, 2, 3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ['shapes']  # no staging folder left


@pytest.mark.parametrize('kind', ['file', 'symlink'])
def test_out_that_is_a_file_or_a_link_is_refused(tmp_path, kind):
    target = tmp_path / 'elsewhere'
    target.mkdir()
    out = tmp_path / 'out'
    if kind == 'file':
        out.write_text('not a folder')
    else:
        out.symlink_to(target)
    one_line_refusal(make(out, *SMALL, check=False), out,
                     'file' if kind == 'file' else 'symbolic link')
    assert list(target.iterdir()) == []


def kill_while_writing(out, *args):
    """Start a large generation and kill it (SIGKILL) once it has written a few images."""
    command = [sys.executable, str(REPO / 'tools/misc/make_demo_data.py'), '--out', str(out),
               *map(str, args)]
    process = subprocess.Popen(command, cwd=out.parent, env=tool_env())
    staging = out.parent / f'.{out.name}.partial'
    deadline = time.time() + 120
    while time.time() < deadline and len(list(staging.rglob('*.png'))) < 10:
        time.sleep(0.05)
    assert process.poll() is None, 'the generation finished before it could be killed'
    process.send_signal(signal.SIGKILL)
    process.wait()


def test_killed_run_leaves_the_earlier_data_as_it_was(tmp_path):
    out = tmp_path / 'shapes'
    make(out, *SMALL)
    (out / 'coco' / 'annotations' / 'my_extra.json').write_text('mine')
    before = tree_digest(out)
    kill_while_writing(out, '--num-train', 3000, '--size', 64)
    assert tree_digest(out) == before
    # the next run clears the staging folder
    make(out, '--num-train', 5, '--num-val', 2, '--size', 64)
    assert sorted(p.name for p in tmp_path.iterdir()) == ['shapes']
    assert (out / 'coco' / 'annotations' / 'my_extra.json').read_text() == 'mine'
    assert len(list((out / 'coco' / 'train2017').iterdir())) == 5


def test_killed_first_run_leaves_no_output(tmp_path):
    out = tmp_path / 'shapes'
    kill_while_writing(out, '--num-train', 3000, '--size', 64)
    assert not out.exists()
    make(out, *SMALL)
    assert len(list((out / 'coco' / 'train2017').iterdir())) == 4


def test_stock_coco_dataset_reads_exact_masks(workspace):
    from mmdet.datasets import CocoDataset
    from pycocotools import mask as mask_utils
    root = workspace / 'data' / 'shapes'
    dataset = CocoDataset(data_root=str(root / 'coco'),
                          ann_file='annotations/instances_val2017.json',
                          data_prefix=dict(img='val2017/'),
                          metainfo=dict(classes=('circle', 'rectangle', 'triangle')),
                          test_mode=True, pipeline=[])
    assert len(dataset) == 50
    coco = json.loads((root / 'coco' / 'annotations' / 'instances_val2017.json').read_text())
    for image in coco['images'][:10]:
        anns = [a for a in coco['annotations'] if a['image_id'] == image['id']]
        assert 1 <= len(anns) <= 3
        name = image['file_name'].replace('.jpg', '')
        semantic = np.array(Image.open(
            root / 'cityscapes' / 'gtFine' / 'val' / 'shapes' / f'{name}_gtFine_labelTrainIds.png'))
        for ann in anns:
            rle = mask_utils.frPyObjects(ann['segmentation'], image['height'], image['width'])
            decoded = mask_utils.decode(mask_utils.merge(rle)).astype(bool)
            inside = semantic[decoded]
            # the polygon rasterised by COCO agrees with the painted shape up to edge pixels
            assert (inside == ann['category_id']).mean() > 0.9
            assert abs(decoded.sum() - ann['area']) <= 0.25 * ann['area']
            x, y, w, h = ann['bbox']
            assert 0 <= x and 0 <= y and x + w <= image['width'] and y + h <= image['height']


def test_stock_segmentation_datasets_read_the_layouts(workspace):
    from mmseg.datasets import ADE20KDataset, CityscapesDataset
    root = workspace / 'data' / 'shapes'
    cityscapes = CityscapesDataset(data_root=str(root / 'cityscapes'),
                                   data_prefix=dict(img_path='leftImg8bit/val',
                                                    seg_map_path='gtFine/val'),
                                   pipeline=[])
    assert len(cityscapes) == 50
    labels = np.array(Image.open(cityscapes[0]['seg_map_path']))
    assert set(np.unique(labels)) <= {0, 1, 2, 3} and len(np.unique(labels)) >= 2
    ade = ADE20KDataset(data_root=str(root / 'ade20k' / 'ADEChallengeData2016'),
                        data_prefix=dict(img_path='images/training',
                                         seg_map_path='annotations/training'),
                        pipeline=[])
    assert len(ade) == 300
    labels = np.array(Image.open(ade[0]['seg_map_path']))
    assert set(np.unique(labels)) <= {1, 2, 3, 4}


@pytest.mark.parametrize('flag,value', [('--num-train', 0), ('--size', 8)])
def test_rejects_bad_arguments(tmp_path, flag, value):
    done = run_tool(['tools/misc/make_demo_data.py', '--out', tmp_path / 'x', flag, value],
                    cwd=tmp_path, check=False)
    assert done.returncode == 2 and flag in done.stderr


def test_width_makes_images_of_a_dataset_s_own_shape(tmp_path):
    """``--width``: COCO's 1333 x 800 (here 160 x 96) in every layout, shapes inside the frame."""
    out = tmp_path / 'wide'
    run_tool(['tools/misc/make_demo_data.py', '--out', out, '--num-train', 3, '--num-val', 1,
              '--size', 96, '--width', 160], cwd=tmp_path)
    coco = json.loads((out / 'coco/annotations/instances_train2017.json').read_text())
    assert {(image['height'], image['width']) for image in coco['images']} == {(96, 160)}
    assert all(x >= 0 and y >= 0 and x + w <= 160 and y + h <= 96 for x, y, w, h in
               (ann['bbox'] for ann in coco['annotations']))
    for path in ('cityscapes/gtFine/train/shapes/shapes_000001_gtFine_labelTrainIds.png',
                 'ade20k/ADEChallengeData2016/images/training/shapes_000001.jpg',
                 'coco/val2017/shapes_000004.jpg'):
        assert Image.open(out / path).size == (160, 96)


def test_standard_layouts_are_read_by_the_real_configs_datasets(tmp_path, monkeypatch):
    """``--standard``: each dataset's own root and names, read by the real configs' dataset sections
    as they are (COCO's 80 categories with their ids, Cityscapes' train ids with 255, ADE20K's 150
    classes with 0 reduced)."""
    from mmdet.datasets import CocoDataset
    from mmengine.config import Config
    from mmengine.registry import DATASETS, init_default_scope
    done = make(tmp_path / 'data', '--standard', '--num-train', 3, '--num-val', 2)
    assert done.stdout.count('wrote 3 train + 2 val') == 3
    coco = json.loads((tmp_path / 'data/coco/annotations/instances_val2017.json').read_text())
    assert [c['name'] for c in coco['categories']] == list(CocoDataset.METAINFO['classes'])
    assert [c['id'] for c in coco['categories']][-1] == 90 and len(
        {a['category_id'] for a in coco['annotations']}
    ) >= 1
    assert all(a['category_id'] in (1, 2, 3) and a['segmentation'] for a in coco['annotations'])
    # the configs' data roots are relative: data/coco/, data/cityscapes/, data/ade/...
    monkeypatch.chdir(tmp_path)
    for config, scope, void in (
        ('vil/mask-rcnn_vil-small_fpn_1x_coco.py', 'mmdet', None),
        ('segformer_rwgka/segformer_mit-b0-rwgka_8xb1-160k_cityscapes-1024x1024.py', 'mmseg', 255),
        ('pervit/upernet_pervit-t_8xb2-160k_ade20k-512x512.py', 'mmseg', 0),
    ):
        init_default_scope(scope)
        cfg = Config.fromfile(REPO / 'configs' / config)
        dataset = DATASETS.build(cfg.train_dataloader.dataset)
        assert len(dataset) == 3, config
        if void is None:
            assert len(dataset[0]['data_samples'].gt_instances) >= 1
        else:  # the map as written (the pipeline's random crop may hold background alone)
            labels = set(np.unique(np.array(Image.open(dataset.get_data_info(0)['seg_map_path']))))
            assert void in labels and len(labels - {void}) >= 2, (config, labels)


def test_standard_layouts_refuse_a_real_dataset(tmp_path):
    """A real dataset where a root goes (here ADE20K's, the last written) is refused in one line
    before any root is written; nothing of it is touched."""
    real = tmp_path / 'data' / 'ade' / 'ADEChallengeData2016' / 'annotations'
    real.mkdir(parents=True)
    (real / 'ADE_train_00000001.png').write_bytes(b'real')
    done = make(tmp_path / 'data', '--standard', check=False)
    one_line_refusal(done, real.parent, 'not empty and was not created by this script')
    assert (real / 'ADE_train_00000001.png').read_bytes() == b'real'
    assert sorted(path.name for path in (tmp_path / 'data').iterdir()) == ['ade']
