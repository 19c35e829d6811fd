"""Mask2Former with ViT-B / Castling-ViT-B on ADE20K (arXiv:2211.10526): the whole model is within 5
% of the slides' 118M parameters, and in deploy mode the castling model drops every N x N term."""
import json

import pytest

from ..conftest import REPO, run_tool

FOLDER = REPO / 'configs/castling'
SOFTMAX = FOLDER / 'mask2former_vit-b_8xb2-160k_ade20k-512x512.py'
CASTLING = FOLDER / 'mask2former_castling-vit-b_8xb2-160k_ade20k-512x512.py'
RUNS = dict(softmax=(SOFTMAX,), train=(CASTLING,), deploy=(CASTLING, '--deploy'))
# the tests that share the module's fixture run on one worker: it runs once, no worker waits for it
pytestmark = pytest.mark.xdist_group('castling_segmentation')


def count_flops(folder):
    for name, (config, *extra) in RUNS.items():
        run_tool(['tools/analysis_tools/get_flops.py', config, '--shape', 512, '--json',
                  folder / f'{name}.json', *extra], cwd=folder)


@pytest.fixture(scope='module')
def counts(tmp_path_factory):
    folder = tmp_path_factory.mktemp('castling_segmentation_flops')
    count_flops(folder)
    return {name: json.loads((folder / f'{name}.json').read_text()) for name in RUNS}


def test_total_parameters_match_the_slides(counts):
    for result in counts.values():
        assert abs(result['params'] / 1e6 - 118) <= 0.05 * 118, result['params']


def test_deploy_drops_every_quadratic_term(counts):
    softmax_attention = counts['softmax']['gmacs_by_op'][
        '_scaled_dot_product_flash_attention_for_cpu'
    ]
    # training: the auxiliary softmax branch costs as much as the softmax model's attention
    assert counts['train']['gmacs_by_op']['bmm'] > softmax_attention
    assert counts['deploy']['gmacs'] < counts['softmax']['gmacs'] - 0.9 * softmax_attention
    assert counts['deploy']['gmacs_by_op']['bmm'] < 0.5 * softmax_attention
