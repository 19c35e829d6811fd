"""tools/misc/montage.py tiles drawings into one sheet, with an optional caption band that says
what the halves of each drawing are; model-index.yml lists every config folder's metafile where
mim looks for it."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml
from PIL import Image

from ..conftest import MODEL_CONFIGS, REPO, load_tool


def test_montage_tiles_and_captions(tmp_path):
    for index in range(5):
        Image.new('RGB', (40, 20), (10 * index, 100, 200)).save(tmp_path / f'{index}.png')
    out = tmp_path / 'sheet' / 'montage.png'
    load_tool('tools/misc/montage.py').main([str(tmp_path), '--pattern', '*.png', '--columns', '2',
                                             '--out', str(out),
                                             '--caption', 'left: ground truth | right: prediction'])
    sheet = np.asarray(Image.open(out))
    assert sheet.shape == (24 + 3 * 20, 2 * 40, 3)
    assert (sheet[:24] < 128).any()  # the caption is drawn in the band above the tiles
    assert (sheet[24:44, :40] == (0, 100, 200)).all()


def test_model_index_imports_every_metafile_where_mim_looks():
    """``mim search mmvisattn`` reads ``mmvisattn/.mim/model-index.yml`` (linked by setup.py, as the
    OpenMMLab packages do); every metafile it imports and every config they name resolve from
    there."""
    mim_dir = REPO / 'mmvisattn' / '.mim'
    index = yaml.safe_load((mim_dir / 'model-index.yml').read_text())
    on_disk = sorted(str(p.relative_to(REPO)) for p in (REPO / 'configs').glob('*/metafile.yml'))
    assert index['Import'] == on_disk
    configs = [model['Config'] for path in index['Import']
               for model in yaml.safe_load((mim_dir / path).read_text())['Models']]
    assert len(configs) == len(MODEL_CONFIGS)
    assert all((mim_dir / config).is_file() for config in configs)


def test_mim_search_lists_the_model_zoo(tmp_path):
    """``make install`` installs openmim and links the package so that mim finds its model index."""
    mim = Path(sys.executable).with_name('mim')
    done = subprocess.run([str(mim), 'search', 'mmvisattn', '--field', 'config'],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    index = yaml.safe_load((REPO / 'model-index.yml').read_text())
    names = {Path(model['Config']).stem for path in index['Import']
             for model in yaml.safe_load((REPO / path).read_text())['Models']}
    assert names and all(f'config id: {name}\n' in done.stdout for name in names)
