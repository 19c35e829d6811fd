"""print_dispatch.py: for every attention layer of every config, at its test input size, the
implementation a training step runs on CPU and on CUDA (answered on this CPU, on meta tensors), and
why the others were passed over; unknown devices and dtypes, and a config naming an implementation
its device refuses, end in one line."""
import json
from importlib import import_module

import pytest
import torch

from mmvisattn.launch.runner import load_config

from ..conftest import REPO, run_tool
from ..test_configs import CONFIGS

TOOL = 'tools/analysis_tools/print_dispatch.py'
VIL = 'configs/vil/retinanet_vil-small_fpn_1x_coco.py'


@pytest.fixture(scope='module')
def tool():
    return import_module('mmvisattn.analysis.print_dispatch')


def every_config_dispatch_problems() -> list:
    """The rows of every config whose choice is refused or passed over, replayed for both devices."""
    tool = import_module('mmvisattn.analysis.print_dispatch')
    problems = []
    for path in CONFIGS:
        cfg = load_config(str(path))
        records = tool.attention_requests(cfg, tool.test_input_size(cfg)[0])
        for device in tool.DEVICES:
            for dtype in (torch.float32, torch.bfloat16):
                problems += [(str(path), row) for row in tool.dispatch_rows(records, device, dtype)
                             if 'refused' in row or row['runs'] in row['passed_over']]
    return problems


def test_every_layer_of_every_config_runs_on_both_devices():
    """One forward per config records the requests; each is replayed for CPU and CUDA in float32
    and bfloat16: something runs everywhere, and auto never names a refused implementation. Every
    config passes load_config's checks on the way (no shipped config is refused by them)."""
    assert every_config_dispatch_problems() == []


def test_building_every_config_leaves_later_models_as_they_were():
    """The SMCA configs (``dropout=0.1`` to mmcv's MultiheadAttention, as every DETR-family config)
    built in this process before a ViT-based backbone: its layers still drop nothing on their
    residual (the patch keep_attention_dropout_defaults)."""
    from mmvisattn.registry import build_from_config, models_of_scope
    build_from_config(load_config(str(REPO / 'configs/smca/smca-la_r50_8xb2-50e_coco.py')))
    backbone = models_of_scope('mmseg').build(dict(type='CastlingViT', img_size=(32, 32), embed_dims=16,
                                                   num_layers=1, num_heads=2))
    assert backbone.layers[0].attn.dropout_layer.p == 0.0


def test_kernels_pass_a_wide_window_and_wide_heads_to_the_torch_path(tool):
    """A ViL layer with window 9 and 96-wide heads, which the Triton kernels refuse (at most 8 and 64):
    on CUDA the torch path runs, and the reasons name the window and the head width."""
    cfg = load_config(str(REPO / VIL))
    cfg.model.backbone.arch = dict(embed_dims=(96, 192, 384, 768), depths=(1, 1, 1, 1), num_heads=(1, 2, 4, 8),
                                   patch_sizes=(4, 2, 2, 2), windows=(9, 9, 7, 7), num_global=(1, 1, 1, 0))
    rows = tool.dispatch_rows(tool.attention_requests(cfg, (256, 256)), 'cuda', torch.bfloat16)
    by_layer = {row['layer']: row for row in rows}
    wide_heads = by_layer['backbone.stages.0.blocks.0.attn']  # window 9, heads of 96
    assert wide_heads['runs'] == 'torch'
    assert wide_heads['passed_over']['triton'] == 'head width 96 is outside the supported range 1..64'
    narrow = by_layer['backbone.stages.2.blocks.0.attn']  # window 7, heads of 96
    assert narrow['runs'] == 'torch'
    cfg.model.backbone.arch['num_heads'] = (3, 6, 12, 24)  # heads of 32: only the window stands in the way
    rows = tool.dispatch_rows(tool.attention_requests(cfg, (256, 256)), 'cuda', torch.bfloat16)
    by_layer = {row['layer']: row for row in rows}
    assert by_layer['backbone.stages.0.blocks.0.attn']['passed_over']['triton'] == \
        'window=9 is outside the supported range 1..8'
    assert by_layer['backbone.stages.2.blocks.0.attn']['runs'] == 'triton'


def test_the_tool_prints_and_writes_the_choice(tmp_path):
    out = tmp_path / 'dispatch.json'
    done = run_tool([TOOL, VIL, '--device', 'cuda', '--dtype', 'bfloat16', '--json', out], cwd=REPO)
    assert done.stdout.startswith(f'{VIL}: input 800x1344 (the test pipeline\'s Resize scale, padded to a multiple '
                                  'of 32), training step on cuda in bfloat16; 12 op calls in 12 attention layers')
    assert '8 layers: backbone.stages.2.blocks.0.attn ... backbone.stages.2.blocks.7.attn' in done.stdout
    assert 'runs: triton' in done.stdout and 'not cpu: C++ kernels for CPU tensors; these are on cuda' in done.stdout
    written = json.loads(out.read_text())
    assert written['input_size'] == [800, 1344] and len(written['rows']) == 12


def test_a_named_implementation_refusing_the_device_fails(tmp_path):
    # the ViL config leaves attn_cfg to the backbone's default: the keys are new to it
    done = run_tool([TOOL, VIL, '--device', 'cuda', '--input-size', '64', '64', '--cfg-new-keys', '--cfg-options',
                     'model.backbone.attn_cfg.type=LongformerAttention', 'model.backbone.attn_cfg.impl=cpu'],
                    cwd=REPO, check=False)
    assert done.returncode == 1
    assert 'runs: cpu (asked; REFUSES: C++ kernels for CPU tensors; these are on cuda)' in done.stdout
    assert done.stderr.strip().splitlines()[-1] == (
        'error: 12 layers name an implementation that refuses cuda float32 (first: backbone.stages.0.blocks.0.attn)')


@pytest.mark.parametrize('flag,value,known', [('--device', 'tpu', 'cpu, cuda'),
                                              ('--dtype', 'float64', 'float32, float16, bfloat16')])
def test_unknown_device_or_dtype_lists_the_known_ones(tmp_path, flag, value, known):
    done = run_tool([TOOL, VIL, flag, value], cwd=tmp_path, check=False)
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: {flag} '{value}' is not known; expected one of {known}"
