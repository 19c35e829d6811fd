"""print_dispatch.py: for every attention layer of every config, at its test input size, the
backend each op runs on CPU and on CUDA (answered on this CPU, on meta tensors) in a training step,
compiled, under the FLOP counters and in ONNX export, and why the others were passed over; every
backend of the package is one of those choices; unknown devices, dtypes and contexts, and a config
naming a backend its device cannot run, end in one line."""
import itertools
import json
from importlib import import_module

import pytest
import torch

from mmvisattn.launch.runner import load_config
from mmvisattn.ops.utils.dispatch import CONTEXTS

from ..conftest import REPO, run_tool
from ..test_configs import CONFIGS

TOOL = 'tools/analysis_tools/print_dispatch.py'
VIL = 'configs/vil/retinanet_vil-small_fpn_1x_coco.py'


@pytest.fixture(scope='module')
def tool():
    return import_module('mmvisattn.analysis.print_dispatch')


@pytest.fixture(scope='module')
def every_config(tool) -> dict:
    """``{config: rows}`` of every shipped config replayed on both devices, in float32 and bfloat16,
    in every context (one forward per config records its op calls; load_config's checks pass on the
    way)."""
    rows = {}
    for path in CONFIGS:
        cfg = load_config(str(path))
        records = tool.attention_requests(cfg, tool.test_input_size(cfg)[0])
        rows[str(path)] = [row for device, dtype, context in itertools.product(
                               tool.DEVICES, (torch.float32, torch.bfloat16), CONTEXTS)
                           for row in tool.dispatch_rows(records, device, dtype, context)]
    return rows


def test_every_layer_of_every_config_runs_on_both_devices(every_config):
    """Something runs everywhere, and auto never names a backend it passed over."""
    problems = [(config, row) for config, rows in every_config.items() for row in rows
                if 'refused' in row or row['runs'] in row['passed_over']]
    assert problems == []


def test_every_backend_of_the_package_is_chosen_for_some_shipped_config(every_config):
    """The backends auto takes for the shipped configs, on CPU or CUDA, in any context, are all the
    package has: none is there that nothing reaches."""
    from mmvisattn.ops import (
        linear_angular,
        masked_softmax,
        peripheral,
        ripple,
        rwgk,
        sliding_chunk,
        trig_relu_features,
    )
    ops = (linear_angular.OP, masked_softmax.OP, peripheral.OP, peripheral.POSITION_OP, ripple.OP,
           rwgk.OP, sliding_chunk.OP, trig_relu_features.OP)
    chosen = {(row['op'], row['runs']) for rows in every_config.values() for row in rows}
    assert chosen == {(op.name, backend) for op in ops for backend in op.backends}


def test_building_every_config_leaves_later_models_as_they_were():
    """The SMCA configs (``dropout=0.1`` to mmcv's MultiheadAttention, as every DETR-family config)
    built in this process before a ViT-based backbone: its layers still drop nothing on their
    residual (the patch keep_attention_dropout_defaults)."""
    from mmvisattn.registry import build_from_config, models_of_scope
    build_from_config(load_config(str(REPO / 'configs/smca/smca-la_r50_8xb2-50e_coco.py')))
    backbone = models_of_scope('mmseg').build(dict(type='CastlingViT', img_size=(32, 32),
                                                   embed_dims=16, num_layers=1, num_heads=2))
    assert backbone.layers[0].attn.dropout_layer.p == 0.0


def test_kernels_pass_a_wide_window_and_wide_heads_to_the_torch_path(tool):
    """A ViL layer with window 9 and 96-wide heads, which the Triton kernels refuse (at most 8 and
    64): on CUDA the torch path runs, and the reasons name the window and the head width."""
    cfg = load_config(str(REPO / VIL))
    cfg.model.backbone.arch = dict(embed_dims=(96, 192, 384, 768), depths=(1, 1, 1, 1),
                                   num_heads=(1, 2, 4, 8), patch_sizes=(4, 2, 2, 2),
                                   windows=(9, 9, 7, 7), num_global=(1, 1, 1, 0))
    rows = tool.dispatch_rows(tool.attention_requests(cfg, (256, 256)), 'cuda', torch.bfloat16)
    by_layer = {row['layer']: row for row in rows}
    wide_heads = by_layer['backbone.stages.0.blocks.0.attn']  # window 9, heads of 96
    assert wide_heads['runs'] == 'torch'
    assert (
        wide_heads['passed_over']['triton'] == 'head width 96 is outside the supported range 1..64'
    )
    narrow = by_layer['backbone.stages.2.blocks.0.attn']  # window 7, heads of 96
    assert narrow['runs'] == 'torch'
    # heads of 32: only the window stands in the way
    cfg.model.backbone.arch['num_heads'] = (3, 6, 12, 24)
    rows = tool.dispatch_rows(tool.attention_requests(cfg, (256, 256)), 'cuda', torch.bfloat16)
    by_layer = {row['layer']: row for row in rows}
    assert by_layer['backbone.stages.0.blocks.0.attn']['passed_over']['triton'] == \
        'window=9 is outside the supported range 1..8'
    assert by_layer['backbone.stages.2.blocks.0.attn']['runs'] == 'triton'


def test_the_tool_prints_and_writes_the_choice(tmp_path):
    out = tmp_path / 'dispatch.json'
    done = run_tool([TOOL, VIL, '--device', 'cuda', '--dtype', 'bfloat16', '--json', out], cwd=REPO)
    assert done.stdout.startswith(f'{VIL}: input 800x1344 (the test pipeline\'s Resize scale, '
                                  'padded to a multiple of 32), training step on cuda in bfloat16; '
                                  '12 op calls in 12 attention layers')
    assert (
        '8 layers: backbone.stages.2.blocks.0.attn ... backbone.stages.2.blocks.7.attn'
        in done.stdout
    )
    assert ('runs: triton' in done.stdout
            and 'not cpu: C++ kernels for CPU tensors; these are on cuda' in done.stdout)
    written = json.loads(out.read_text())
    assert written['input_size'] == [800, 1344] and len(written['rows']) == 12


def test_a_named_implementation_refusing_the_device_fails(tmp_path):
    # the ViL config leaves attn_cfg to the backbone's default: the keys are new to it
    done = run_tool([TOOL, VIL, '--device', 'cuda', '--input-size', '64', '64', '--cfg-new-keys',
                     '--cfg-options', 'model.backbone.attn_cfg.type=LongformerAttention',
                     'model.backbone.attn_cfg.impl=cpu'],
                    cwd=REPO, check=False)
    assert done.returncode == 1
    assert ("runs: cpu (asked; UNSUPPORTED: sliding_chunk_attention(impl='cpu'): C++ kernels for "
            "CPU tensors; "
            'these are on cuda)') in done.stdout
    assert done.stderr.strip().splitlines()[-1] == (
        'error: 12 layers name a backend that cannot run a training step on cuda in float32 '
        '(first: backbone.stages.0.blocks.0.attn)')


def test_an_export_of_smca_ripple_takes_the_dense_form_on_cuda(tmp_path):
    done = run_tool([TOOL, 'configs/smca/smca-ripple_r50_8xb2-50e_coco.py', '--device', 'cuda',
                     '--context', 'export'], cwd=REPO)
    assert 'ONNX export on cuda in float32' in done.stdout and 'runs: dense' in done.stdout
    assert ('runs: triton' not in done.stdout
            and 'not triton: an ONNX export cannot hold a Triton kernel' in done.stdout)


@pytest.mark.parametrize('flag,value,known', [('--device', 'tpu', 'cpu, cuda'),
                                              ('--dtype', 'float64', 'float32, float16, bfloat16'),
                                              ('--context', 'jit', ', '.join(CONTEXTS))])
def test_unknown_device_or_dtype_lists_the_known_ones(tmp_path, flag, value, known):
    done = run_tool([TOOL, VIL, flag, value], cwd=tmp_path, check=False)
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: {flag} '{value}' is not known; expected one of {known}"
