"""Every kind of bad checkpoint, through tools/test.py, tools/train.py --resume and each converter:
one line naming the file and what was expected, never advice to turn weights_only off."""
import os

import pytest
import torch

from ..conftest import run_tool
from .conftest import DET_DEMO, ONE_ITERATION, SEG_DEMO, fails_in_one_line, write_small_data


@pytest.fixture(scope='module')
def small_data(tmp_path_factory):
    """One working directory with shapes data for the module: its tests write bad checkpoints and
    configs beside the data (each under its own name) but never damage the data."""
    return write_small_data(tmp_path_factory.mktemp('checkpoints'))


class RunsCode:
    """A pickle that would run ``os.system`` when loaded without weights_only."""

    def __reduce__(self):
        return os.system, ('touch pwned',)


def write_bad_checkpoint(kind: str, path) -> str:
    """Write a damaged checkpoint of ``kind``; returns the phrase its message must contain."""
    good = path.parent / 'good.pth'
    torch.save({'state_dict': {'weight': torch.ones(3)}}, good)
    content = good.read_bytes()
    if kind == 'truncated':
        path.write_bytes(content[:len(content) // 2])
    elif kind == 'empty':
        path.write_bytes(b'')
        return 'is empty (0 bytes)'
    elif kind == 'random':
        path.write_bytes(os.urandom(4096))
    elif kind == 'text':
        path.write_text('this is not a checkpoint\n')
    elif kind == 'not_a_state_dict':
        torch.save([1, 2, 3], path)
        return 'holds no state dict'
    elif kind == 'unsafe_pickle':
        torch.save({'state_dict': {'weight': torch.ones(1)}, 'meta': RunsCode()}, path)
        return 'was refused as unsafe: its pickle asks for posix.system'
    return 'is not a PyTorch checkpoint, or it is corrupt or truncated'


KINDS = ['truncated', 'empty', 'random', 'text', 'not_a_state_dict', 'unsafe_pickle']


def check_message(line: str, path, expected: str) -> None:
    assert f"checkpoint '{path}'" in line and expected in line, line
    assert 'weights_only' not in line


@pytest.mark.parametrize('kind', KINDS)
def test_test_tool_names_a_bad_checkpoint(small_data, kind):
    path = small_data / f'{kind}.pth'
    expected = write_bad_checkpoint(kind, path)
    line = fails_in_one_line(['tools/test.py', DET_DEMO, path, '--work-dir', small_data / 'work'],
                             small_data, small_data / 'work')
    check_message(line, path, expected)
    assert not (small_data / 'pwned').exists()


def test_resume_from_a_truncated_checkpoint_is_named(small_data):
    path = small_data / 'truncated.pth'
    expected = write_bad_checkpoint('truncated', path)
    line = fails_in_one_line(['tools/train.py', SEG_DEMO, '--work-dir', small_data / 'work',
                              '--resume', path, *ONE_ITERATION], small_data, small_data / 'work')
    check_message(line, path, expected)


@pytest.mark.parametrize('kind', ['truncated', 'unsafe_pickle', 'another_model'])
def test_bad_pretrained_backbone_weights_are_named(small_data, kind):
    """Weights named in the backbone's ``init_cfg`` are read when training starts; bad ones end the
    run in one line naming the file."""
    path = small_data / f'{kind}.pth'
    if kind == 'another_model':
        torch.save({'state_dict': {'conv1.weight': torch.ones(1)}}, path)
        expected = 'is in no layout MixVisionTransformerRWGKA reads'
    else:
        expected = write_bad_checkpoint(kind, path)
    config = small_data / 'pretrained.py'
    config.write_text(f"_base_ = '{SEG_DEMO.parent.parent}/segformer_rwgka/"
                      "segformer_mit-b0-rwgka_1xb8-600i_shapes-cityscapes-128.py'\n"
                      f"model = dict(backbone=dict(init_cfg=dict(_delete_=True, type='Pretrained', "
                      f"checkpoint='{path}')))\n")
    line = fails_in_one_line(['tools/train.py', config, '--work-dir', small_data / 'work',
                              *ONE_ITERATION],
                             small_data, small_data / 'work')
    check_message(line, path, expected)
    assert not (small_data / 'pwned').exists()


CONVERTERS = ['mit2mmvisattn.py', 'pervit2mmvisattn.py', 'vit2mmvisattn.py', 'vil2mmvisattn.py']


def converter_args(converter: str, src, dst):
    config = ['--config', 'configs/vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py'] \
        if converter == 'vil2mmvisattn.py' else []
    return [f'tools/model_converters/{converter}', src, dst, *config]


@pytest.mark.parametrize('converter', CONVERTERS)
def test_converters_name_a_bad_checkpoint(tmp_path, converter):
    path = tmp_path / 'text.pth'
    expected = write_bad_checkpoint('text', path)
    line = fails_in_one_line(converter_args(converter, path, tmp_path / 'out' / 'x.pth'), tmp_path,
                             tmp_path / 'out')
    check_message(line, path, expected)


@pytest.mark.parametrize('converter', CONVERTERS)
def test_converters_refuse_to_overwrite_their_input(tmp_path, converter):
    path = tmp_path / 'official.pth'
    torch.save({'state_dict': {'weight': torch.ones(3)}}, path)
    line = fails_in_one_line(converter_args(converter, path, path), tmp_path, tmp_path / 'none')
    assert 'is the input checkpoint' in line and str(path) in line


def test_checkpoint_of_another_model_is_refused_unless_partial_is_allowed(small_data):
    """A detector's checkpoint for the segmentation demo: the stock tools score a random model."""
    run_tool(['tools/train.py', DET_DEMO, '--work-dir', small_data / 'det', *ONE_ITERATION],
             cwd=small_data)
    checkpoint = small_data / 'det' / 'iter_1.pth'
    line = fails_in_one_line(['tools/test.py', SEG_DEMO, checkpoint, '--work-dir',
                              small_data / 'work'], small_data,
                             small_data / 'work')
    assert f"checkpoint '{checkpoint}' does not fit the model" in line
    assert "weights are not in it (e.g. backbone." in line and '--allow-partial-checkpoint' in line
    done = run_tool(['tools/test.py', SEG_DEMO, checkpoint, '--work-dir', small_data / 'work',
                     '--allow-partial-checkpoint'], cwd=small_data)
    assert 'mIoU:' in done.stdout + done.stderr
