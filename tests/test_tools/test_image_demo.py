"""demo/image_demo.py through the stock inferencers of both scopes, with a checkpoint trained for
two iterations on the shapes data: the drawn image has the input's size and shows the
predictions."""
import numpy as np
import pytest
from PIL import Image

from ..conftest import REPO, run_tool

SHORT = ['train_cfg.max_iters=2', 'train_dataloader.batch_size=2']
CASES = {
    'det': ('configs/picodet/picodet-s_castling_1xb16-600i_shapes-coco-128.py',
            'data/shapes/coco/val2017', ['--score-thr', '0']),
    'seg': ('configs/segformer_rwgka/segformer_mit-b0-rwgka_1xb8-600i_shapes-cityscapes-128.py',
            'data/shapes/cityscapes/leftImg8bit/val', []),
}


@pytest.mark.parametrize('scope', sorted(CASES))
def test_demo_draws_the_predictions_of_a_trained_checkpoint(scope, workspace, tmp_path):
    config, images, extra = CASES[scope]
    run_tool(['tools/train.py', REPO / config, '--work-dir', tmp_path / 'train', '--cfg-options',
              *SHORT],
             cwd=workspace)
    image = sorted((workspace / images).rglob('*.*'))[0]
    done = run_tool(['demo/image_demo.py', image, REPO / config, '--weights',
                     tmp_path / 'train/iter_2.pth',
                     '--out-dir', tmp_path / 'out', *extra], cwd=workspace)
    assert 'drawn predictions in' in done.stdout
    drawn = np.asarray(Image.open(tmp_path / 'out/vis' / image.name).convert('RGB'))
    original = np.asarray(Image.open(image).convert('RGB'))
    assert drawn.shape == original.shape
    assert (drawn != original).any()  # boxes or a mask overlay were drawn
    assert {p.name for p in tmp_path.iterdir()} == {'train', 'out'}


def test_missing_image_is_named_in_one_line(tmp_path):
    done = run_tool(['demo/image_demo.py', tmp_path / 'nope.jpg', REPO / CASES['det'][0]],
                    cwd=tmp_path, check=False)
    assert done.returncode == 1 and 'Traceback' not in done.stderr
    assert (
        done.stderr.strip().splitlines()[-1]
        == f"error: image '{tmp_path / 'nope.jpg'}' does not exist"
    )
