"""The shapes data: deterministic, refuses foreign directories, and read unchanged by the stock
COCO, Cityscapes and ADE20K dataset classes with exact masks."""
import hashlib
import json

import numpy as np
import pytest
from PIL import Image

from ..conftest import run_tool


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


def test_stock_coco_dataset_reads_exact_masks(workspace):
    from mmdet.datasets import CocoDataset
    from pycocotools import mask as mask_utils
    root = workspace / 'data' / 'shapes'
    dataset = CocoDataset(data_root=str(root / 'coco'), ann_file='annotations/instances_val2017.json',
                          data_prefix=dict(img='val2017/'), metainfo=dict(classes=('circle', 'rectangle', 'triangle')),
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
                                   data_prefix=dict(img_path='leftImg8bit/val', seg_map_path='gtFine/val'),
                                   pipeline=[])
    assert len(cityscapes) == 50
    labels = np.array(Image.open(cityscapes[0]['seg_map_path']))
    assert set(np.unique(labels)) <= {0, 1, 2, 3} and len(np.unique(labels)) >= 2
    ade = ADE20KDataset(data_root=str(root / 'ade20k' / 'ADEChallengeData2016'),
                        data_prefix=dict(img_path='images/training', seg_map_path='annotations/training'),
                        pipeline=[])
    assert len(ade) == 300
    labels = np.array(Image.open(ade[0]['seg_map_path']))
    assert set(np.unique(labels)) <= {1, 2, 3, 4}


@pytest.mark.parametrize('flag,value', [('--num-train', 0), ('--size', 8)])
def test_rejects_bad_arguments(tmp_path, flag, value):
    done = run_tool(['tools/misc/make_demo_data.py', '--out', tmp_path / 'x', flag, value], cwd=tmp_path, check=False)
    assert done.returncode == 2 and flag in done.stderr
