"""Mask2Former with ViT-B / Castling-ViT-B on ADE20K (arXiv:2211.10526): the whole model is within 5 % of
the slides' 118M parameters, and in deploy mode the castling model drops every N x N term."""
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from ..conftest import REPO, run_tool

FOLDER = REPO / 'configs/castling'
SOFTMAX = FOLDER / 'mask2former_vit-b_8xb2-160k_ade20k-512x512.py'
CASTLING = FOLDER / 'mask2former_castling-vit-b_8xb2-160k_ade20k-512x512.py'


def flops(tmp_path, config, *extra):
    out = tmp_path / f'{config.stem}{"-".join(extra)}.json'
    run_tool(['tools/analysis_tools/get_flops.py', config, '--shape', 512, '--json', out, *extra], cwd=tmp_path)
    return json.loads(out.read_text())


@pytest.fixture(scope='module')
def counts(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp('flops')
    runs = dict(softmax=(SOFTMAX,), train=(CASTLING,), deploy=(CASTLING, '--deploy'))
    with ThreadPoolExecutor(len(runs)) as pool:  # three processes, mostly importing: side by side
        counted = {name: pool.submit(flops, tmp_path, *args) for name, args in runs.items()}
        return {name: future.result() for name, future in counted.items()}


def test_total_parameters_match_the_slides(counts):
    for result in counts.values():
        assert abs(result['params'] / 1e6 - 118) <= 0.05 * 118, result['params']


def test_deploy_drops_every_quadratic_term(counts):
    softmax_attention = counts['softmax']['gmacs_by_op']['_scaled_dot_product_flash_attention_for_cpu']
    # training: the auxiliary softmax branch costs as much as the softmax model's attention
    assert counts['train']['gmacs_by_op']['bmm'] > softmax_attention
    assert counts['deploy']['gmacs'] < counts['softmax']['gmacs'] - 0.9 * softmax_attention
    assert counts['deploy']['gmacs_by_op']['bmm'] < 0.5 * softmax_attention
