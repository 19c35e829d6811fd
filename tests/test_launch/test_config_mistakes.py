"""Config mistakes and bad inputs of every tool end in one line naming the key, type, argument or
file, with a non-zero exit, before anything is written (:mod:`mmvisattn.launch.config_checks`)."""
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from mmengine.config import Config

import mmvisattn  # noqa: F401
from mmvisattn.launch.config_checks import accepted_arguments, check_config

from ..conftest import REPO
from .conftest import DET_DEMO, fails_in_one_line

VIL_DEMO = REPO / 'configs/vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py'
RWGKA_DEMO = (
    REPO / 'configs/segformer_rwgka/segformer_mit-b0-rwgka_1xb8-600i_shapes-cityscapes-128.py'
)

MISTAKES = {
    'option key': (VIL_DEMO, ['--cfg-options', 'train_cfg.max_iter=2'],
                   "error: --cfg-options train_cfg.max_iter: 'train_cfg' has no 'max_iter'; "
                   "nearest: max_iters"),
    'attention type': (RWGKA_DEMO, ['--cfg-options', 'model.backbone.attn_cfg.type=RWGKAttentio'],
                       "error: model.backbone.attn_cfg.type 'RWGKAttentio' is not registered in "
                       "scope 'mmseg'; "
                       'nearest: RWGKAttention'),
    'constructor argument': (VIL_DEMO,
                             ['--cfg-new-keys', '--cfg-options', 'model.bbox_head.num_anchor=9'],
                             "error: model.bbox_head.num_anchor: RetinaHead takes no argument "
                             "'num_anchor'"),
    'top-level key': (VIL_DEMO,
                      ['--cfg-new-keys', '--cfg-options', 'optim_wraper.optimizer.lr=0.1'],
                      "error: top-level config key 'optim_wraper' is not a Runner argument, and "
                      "the Runner would "
                      'ignore it; nearest: optim_wrapper'),
}


@pytest.mark.parametrize('tool,mistake',
                         [('tools/train.py', mistake) for mistake in sorted(MISTAKES)] + [
    ('tools/analysis_tools/get_flops.py', 'option key'),
    ('tools/analysis_tools/get_flops.py', 'attention type')])
def test_config_mistake_is_one_line_before_anything_is_written(tmp_path, tool, mistake):
    config, options, expected = MISTAKES[mistake]
    work_dir = tmp_path / 'work'
    extra = ['--work-dir', work_dir] if tool.endswith('train.py') else []
    message = fails_in_one_line([tool, config, *extra, *options], cwd=tmp_path, work_dir=work_dir)
    assert message.startswith(expected), message
    assert not work_dir.exists()


def test_new_keys_are_taken_when_asked_for():
    cfg = Config.fromfile(DET_DEMO)
    check_config(cfg, {'train_dataloader.pin_memory': True}, new_keys=True)
    assert cfg.train_dataloader.pin_memory is True


RUNNER_KEYS = {'compile': True, 'compile.backend': 'eager', 'sync_bn': 'torch',
               'model_wrapper_cfg.type': 'MMDistributedDataParallel',
               'optim_wrapper.constructor': 'LearningRateDecayOptimizerConstructor',
               'optim_wrapper.paramwise_cfg.decay_rate': 0.9}


@pytest.mark.parametrize('key', RUNNER_KEYS)
def test_keys_the_runner_reads_are_taken_as_stock_tools_take_them(key):
    """What mmengine reads beside the Runner's arguments (``compile``, ``sync_bn``,
    ``model_wrapper_cfg``, an optimizer wrapper's ``constructor`` and ``paramwise_cfg``) needs no
    --cfg-new-keys; a misspelling still fails."""
    check_config(Config.fromfile(VIL_DEMO), {key: RUNNER_KEYS[key]})
    with pytest.raises(SystemExit,
                       match=r"^error: --cfg-options compile.backnd: 'compile' has no 'backnd'; "
                                         'nearest: backend'):
        check_config(Config.fromfile(VIL_DEMO), {'compile.backnd': 'eager'})


class Forwards(torch.nn.Conv2d):
    def __init__(self, scale: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale


class Keeps(torch.nn.Module):
    def __init__(self, kind: str = 'a', **kwargs):
        super().__init__()
        self.settings = dict(type=kind, **kwargs)


def test_arguments_follow_kwargs_through_super_only():
    assert {'scale', 'in_channels', 'kernel_size', 'padding_mode'} <= accepted_arguments(Forwards)
    assert accepted_arguments(Keeps) is None  # its **kwargs go elsewhere: anything is accepted


def test_missing_config_of_get_flops_is_one_line(tmp_path):
    message = fails_in_one_line(['tools/analysis_tools/get_flops.py', 'configs/no_such.py'],
                                cwd=tmp_path, work_dir=tmp_path / 'none')
    assert message == "error: config file 'configs/no_such.py' does not exist"


def test_unreadable_config_is_one_line(tmp_path):
    broken = tmp_path / 'broken.py'
    broken.write_text("_base_ = ['missing_base.py']\n")
    message = fails_in_one_line(['tools/train.py', broken], cwd=tmp_path,
                                work_dir=tmp_path / 'work')
    assert message.startswith(f"error: config file '{broken}' cannot be read: ")


@pytest.mark.parametrize('tool',
                         ['demo/image_demo.py', 'tools/analysis_tools/visualize_attention.py'])
def test_corrupt_weights_never_advise_weights_only_false(tmp_path, tool):
    image = tmp_path / 'image.png'
    cv2.imwrite(str(image), np.zeros((32, 32, 3), np.uint8))
    weights = tmp_path / 'weights.pth'
    torch.save({'state_dict': {}}, weights)
    weights.write_bytes(weights.read_bytes()[:40])
    args = ([tool, image, DET_DEMO, '--weights', weights, '--out-dir', tmp_path / 'out']
            if 'demo' in tool else
            [tool, '--config', DET_DEMO, '--checkpoint', weights, '--image', image, '--out',
             tmp_path / 'out'])
    message = fails_in_one_line(args, cwd=tmp_path, work_dir=tmp_path / 'out')
    assert str(weights) in message and 'weights_only' not in message
    assert not Path(tmp_path / 'out').exists()


def test_runner_arguments_the_config_leaves_out_can_be_set():
    cfg = Config.fromfile(DET_DEMO)
    cfg.pop('randomness')  # as a config that leaves it out (the demos set their seed)
    check_config(cfg, {'randomness.seed': 3, 'load_from': None})
    assert cfg.randomness.seed == 3
    with pytest.raises(SystemExit, match=r"'randomness' has no 'sed'; nearest: seed"):
        check_config(Config.fromfile(DET_DEMO), {'randomness.sed': 3})
    # the demo's randomness=dict(seed=0) takes the others as well
    seeded = Config.fromfile(DET_DEMO)
    check_config(seeded, {'randomness.deterministic': True})
    assert seeded.randomness == dict(seed=0, deterministic=True)


@pytest.mark.parametrize('option',
                         ['train_cfg.val_begin', 'default_hooks.logger.log_metric_by_epoch',
                                    'optim_wrapper.accumulative_counts',
                          'env_cfg.dist_cfg.timeout'])
def test_arguments_of_the_built_classes_are_options_without_new_keys(option):
    """An argument of the class a dict builds (the loop, a hook, the optimizer wrapper), or of the
    process group's start, may be set although the config leaves it at its default; it is checked
    against the class's signature (the start's keys)."""
    cfg = Config.fromfile(VIL_DEMO)
    check_config(cfg, {option: 4})
    assert cfg[option.split('.')[0]] is not None
    with pytest.raises(SystemExit, match=rf"^error: --cfg-options {option}x: .* has no "
                       rf"'{option.rpartition('.')[2]}x'; "
                                         rf"nearest: {option.rpartition('.')[2]}"):
        check_config(Config.fromfile(VIL_DEMO), {f'{option}x': 4})


def test_the_loop_a_train_cfg_without_type_builds_takes_its_arguments():
    cfg = Config.fromfile(VIL_DEMO)
    cfg.train_cfg = dict(by_epoch=True, max_epochs=2)
    check_config(cfg, {'train_cfg.val_begin': 2})  # EpochBasedTrainLoop's
    assert cfg.train_cfg.val_begin == 2
