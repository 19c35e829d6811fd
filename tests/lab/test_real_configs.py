"""One real COCO, Cityscapes or ADE20K config of every family, and the stock twins, through
``tools/train.py`` and ``tools/test.py`` on the shapes data in the datasets' own layouts
(``make_demo_data.py --standard``), as a user smoke-tests a config before downloading the dataset
(docs/user_guides/train_test.md): only the schedule (one iteration, or one epoch of two images), the
batch size, the loader workers and the pretrained-weight loading are overridden. Training must end
with a checkpoint and the test must print the dataset's metric (an untrained detector's empty result
scores mAP 0, :func:`lab.deploy_benchmark.metric_of`)."""
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest
from mmengine.config import Config

from lab.deploy_benchmark import metric_of

from ..conftest import REPO, run_tool

NUM_TRAIN, NUM_VAL, ITERS, BATCH = 2, 1, 1, 2  # one step: a 1333 x 800 model takes minutes on a CPU
# config -> the metrics its test prints
CONFIGS = {'vil/retinanet_vil-small_fpn_1x_coco.py': ('coco/bbox_mAP',),
           'vil/mask-rcnn_vil-small_fpn_ms-3x_coco.py': ('coco/bbox_mAP', 'coco/segm_mAP'),
           'smca/smca-ripple_r50_8xb2-50e_coco.py': ('coco/bbox_mAP',),
           'picodet/picodet-s_castling_8xb32-300e_coco-320.py': ('coco/bbox_mAP',),
           'picodet/picodet-s_esnet_8xb32-300e_coco-320.py': ('coco/bbox_mAP',),
           'pervit/mask-rcnn_pervit-t_simplefpn_1x_coco.py': ('coco/bbox_mAP', 'coco/segm_mAP'),
           'segformer_rwgka/segformer_mit-b0-rwgka_8xb1-160k_cityscapes-1024x1024.py': ('mIoU',),
           'segformer_rwgka/segformer_mit-b0-rwgka_8xb2-160k_ade20k-512x512.py': ('mIoU',),
           'pervit/upernet_pervit-t_8xb2-160k_ade20k-512x512.py': ('mIoU',),
           'castling/mask2former_castling-vit-b_8xb2-160k_ade20k-512x512.py': ('mIoU',),
           'castling/mask2former_vit-b_8xb2-160k_ade20k-512x512.py': ('mIoU',),}


@pytest.fixture(scope='module')
def standard_data(tmp_path_factory) -> Path:
    """A working directory whose ``data/`` holds COCO, Cityscapes and ADE20K where the real configs
    read them."""
    root = tmp_path_factory.mktemp('standard')
    run_tool(['tools/misc/make_demo_data.py', '--standard', '--out', root / 'data', '--num-train',
              NUM_TRAIN, '--num-val', NUM_VAL], cwd=root)
    return root


def pretrained_weights(node, path: str) -> Iterator[Tuple[str, object]]:
    """``(key, value)`` of every setting under ``node`` that loads weights from a file or a URL."""
    if isinstance(node, dict):
        if node.get('type') == 'Pretrained':
            yield path, node
        for key, value in node.items():
            if key == 'pretrained' and value is not None:
                yield f'{path}.{key}', value
            elif key != 'type':
                yield from pretrained_weights(value, f'{path}.{key}')


def smoke_test_options(cfg: Config) -> List[str]:
    """The ``--cfg-options`` of a smoke test: a short schedule, batch 2, no loader workers, no
    pretrained weights."""
    loop = 'max_iters' if 'max_iters' in cfg.train_cfg else 'max_epochs'
    length = ITERS if loop == 'max_iters' else 1
    options = [f'train_cfg.{loop}={length}', f'train_cfg.val_interval={length}',
               f'train_dataloader.batch_size={BATCH}', 'load_from=None']
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        options += [f'{loader}.num_workers=0', f'{loader}.persistent_workers=False']
    return options + [f'{key}=None' for key, _ in pretrained_weights(cfg.model, 'model')]


def test_every_real_config_names_its_pretrained_weights_where_the_options_reach():
    """The override list finds each config's weights (a backbone's init_cfg, a model's
    ``pretrained``)."""
    for config in CONFIGS:
        cfg = Config.fromfile(REPO / 'configs' / config)
        options = smoke_test_options(cfg)
        cfg.merge_from_dict(dict(option.split('=') for option in options))
        assert not list(pretrained_weights(cfg.model, 'model')), config


@pytest.mark.xdist_group('real_configs')  # one at a time: a model at 1333 x 800 takes up to 6 GB
@pytest.mark.parametrize('config', CONFIGS)
def test_real_config_trains_and_tests_on_the_standard_layouts(standard_data, config):
    cfg = Config.fromfile(REPO / 'configs' / config)
    options = smoke_test_options(cfg)
    work_dir = standard_data / 'work_dirs' / Path(config).stem
    run_tool(['tools/train.py', REPO / 'configs' / config, '--work-dir', work_dir, '--cfg-options',
              *options],
             cwd=standard_data, timeout=1200)
    checkpoint = (work_dir / 'last_checkpoint').read_text().strip()
    assert Path(checkpoint).is_file(), checkpoint
    test_dir = work_dir / 'test'
    done = run_tool(['tools/test.py', REPO / 'configs' / config, checkpoint, '--work-dir', test_dir,
                     '--cfg-options', *options], cwd=standard_data, timeout=600)
    for key in CONFIGS[config]:
        value = metric_of(test_dir, key)
        assert value is None or 0 <= value <= (1 if key.startswith('coco/') else 100), (key, value)
        assert value is not None or key.startswith('coco/'), (
            f'{config}: no {key}\n{done.stdout[-2000:]}'
        )
