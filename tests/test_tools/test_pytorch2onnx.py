"""tools/deployment/pytorch2onnx.py: every model the deploy story needs exports and matches ONNX
Runtime (small inputs), Castling deploy graphs hold no tokens x tokens product (and the
training-mode graph does), and bad input fails in one line. Needs the deploy extra."""
from importlib import import_module
from pathlib import Path

import pytest
import torch

from mmvisattn.registry import build_from_config

from ..conftest import REPO, load_tool, run_tool

pytest.importorskip('onnxruntime', reason='the deploy extra (onnx, onnxruntime) is not installed')
pytest.importorskip('onnx', reason='the deploy extra (onnx, onnxruntime) is not installed')

from mmvisattn.deploy import attention_sizes, export_onnx, quadratic_matmuls, switch_to_deploy  # noqa: E402

TOOL = 'tools/deployment/pytorch2onnx.py'
EXPORTED = {'picodet/picodet-s_esnet_8xb32-300e_coco-320.py': (64, 64),
            'picodet/picodet-m_esnet_8xb32-300e_coco-320.py': (64, 64),
            'picodet/picodet-l_esnet_8xb32-300e_coco-320.py': (64, 64),
            'picodet/picodet-s_castling_8xb32-300e_coco-320.py': (64, 96),
            'picodet/picodet-l_castling_8xb32-300e_coco-320.py': (64, 64),
            'segformer_rwgka/segformer_mit-b0-rwgka_8xb1-160k_cityscapes-1024x1024.py': (64, 96),
            'segformer_rwgka/segformer_mit-b1-rwgka_8xb1-160k_cityscapes-1024x1024.py': (64, 64),
            'segformer_rwgka/segformer_mit-b2-rwgka_8xb1-160k_cityscapes-1024x1024.py': (64, 64),
            'segformer_rwgka/segformer_mit-b0-rwgkp_8xb1-160k_cityscapes-1024x1024.py': (64, 64),
            'castling/segformer-head_castling-levit-s_1xb8-600i_shapes-cityscapes-128.py': (64, 64),
            'vil/retinanet_vil-tiny_fpn_1x_coco.py': (96, 128),}


def save_checkpoint(config: str, path: Path) -> Path:
    torch.manual_seed(0)
    model = build_from_config(REPO / 'configs' / config)
    model.init_weights()
    torch.save({'state_dict': model.state_dict()}, path)
    return path


@pytest.mark.parametrize('config', sorted(EXPORTED), ids=lambda c: Path(c).stem)
def test_exports_and_matches_onnxruntime(config, tmp_path, capsys):
    checkpoint = save_checkpoint(config, tmp_path / 'model.pth')
    out = tmp_path / 'model.onnx'
    load_tool(TOOL).main([str(REPO / 'configs' / config), str(checkpoint), '--out', str(out),
                          '--shape', *map(str, EXPORTED[config])])
    printed = capsys.readouterr().out
    assert out.stat().st_size > 0 and 'max relative difference' in printed
    if 'castling' in config:
        assert 'no MatMul of the graph is tokens x tokens' in printed


def test_dynamic_axes_run_at_other_sizes(tmp_path, capsys):
    import onnxruntime
    config = 'picodet/picodet-s_castling_8xb32-300e_coco-320.py'
    checkpoint = save_checkpoint(config, tmp_path / 'model.pth')
    out = tmp_path / 'model.onnx'
    load_tool(TOOL).main([str(REPO / 'configs' / config), str(checkpoint), '--out', str(out),
                          '--shape', '64', '64', '--dynamic'])
    assert 'no MatMul of the graph is tokens x tokens' in capsys.readouterr().out
    session = onnxruntime.InferenceSession(str(out), providers=['CPUExecutionProvider'])
    scores = session.run(None, {'images': torch.randn(2, 3, 96, 64).numpy()})[0]
    assert scores.shape == (2, 80, 12, 8)


def test_a_castling_graph_exports_only_in_its_deploy_form():
    """Exporting with the training-only softmax branch still in place refuses in one line (the graph
    would be the training network, silently); after the switch the graph holds no tokens x tokens
    product, which the check finds where softmax attention stands in for Castling's (the same
    backbone, ``attn_cfg``)."""
    from mmengine.config import Config
    torch.manual_seed(0)
    config = REPO / 'configs/picodet/picodet-s_castling_8xb32-300e_coco-320.py'
    model = build_from_config(config).eval()
    images = torch.randn(1, 3, 64, 64)
    with pytest.raises(ValueError,
                       match=r'^masked_softmax_attention: the training-only softmax branch is '
                       r'still in '
                                         r'place: call model.backbone.switch_to_deploy\(\) '
                                         r'\(mmdeploy does\)'):
        export_onnx(model, images, opset=17)
    sizes = attention_sizes(model, images)
    model.backbone.switch_to_deploy()
    assert switch_to_deploy(model) == 0  # the backbone held all five
    assert quadratic_matmuls(export_onnx(model, images, opset=17), sizes) == []
    softmax = Config.fromfile(config)
    softmax.model.backbone.attn_cfg = dict(type='SoftmaxAttention')
    softmax_graph = quadratic_matmuls(export_onnx(build_from_config(softmax).eval(), images,
                                                  opset=17), sizes)
    assert softmax_graph and all(f'{n}, {n}]' in ' '.join(softmax_graph) for n, _ in sizes)


@pytest.mark.parametrize('config, extra, message', [
    ('smca/smca-ripple_r50_8xb2-50e_coco.py', ['--dynamic'],
     r'RippleAttention \(encoder.layers.0.self_attn\) exports for one input size only \(its ring '
     r'index'),
    ('pervit/upernet_pervit-t_8xb2-160k_ade20k-512x512.py', ['--shape', '64', '64', '--dynamic'],
     r'PeripheralAttention \(backbone.blocks.0.attn\) exports for one input size only'),
    ('picodet/picodet-s_esnet_8xb32-300e_coco-320.py', ['--shape', '100', '128'],
     r'input shape \(100, 128\); expected two positive multiples of 32'),
    ('picodet/picodet-s_esnet_8xb32-300e_coco-320.py', ['--opset', '9'],
     r'opset 9 is not supported; expected 14..18'),
])
def test_what_cannot_be_exported_fails_in_one_line(config, extra, message, tmp_path):
    checkpoint = save_checkpoint(config, tmp_path / 'model.pth')
    with pytest.raises(SystemExit, match=message):
        load_tool(TOOL).main([str(REPO / 'configs' / config), str(checkpoint), '--out',
                              str(tmp_path / 'm.onnx'), *extra])
    assert not (tmp_path / 'm.onnx').exists()


def test_a_checkpoint_of_another_model_and_an_existing_output_fail_in_one_line(tmp_path):
    other = save_checkpoint('picodet/picodet-m_esnet_8xb32-300e_coco-320.py',
                            tmp_path / 'other.pth')
    config = REPO / 'configs/picodet/picodet-s_esnet_8xb32-300e_coco-320.py'
    done = run_tool([TOOL, config, other, '--out', tmp_path / 'm.onnx'], tmp_path, timeout=300,
                    check=False)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and 'Traceback' not in done.stderr, done.stderr
    assert lines[-1].startswith('error: checkpoint') and lines[-1].endswith(
        'is it a checkpoint of this config?'
    )
    (tmp_path / 'm.onnx').write_bytes(b'kept')
    with pytest.raises(SystemExit, match="m.onnx' exists; pass --overwrite"):
        load_tool(TOOL).main([str(config), str(other), '--out', str(tmp_path / 'm.onnx')])
    assert (tmp_path / 'm.onnx').read_bytes() == b'kept'


def test_inference_benchmark_prints_the_table_and_writes_json(tmp_path, capsys):
    import json
    import_module('lab.bench.inference').main(
        ['--models', 'picodet-s-esnet', 'picodet-s-castling', '--shape', '64', '64', '--repeats',
         '1', '--warmup', '0', '--out-dir', str(tmp_path)])
    printed = capsys.readouterr().out
    assert '| picodet-s-castling | 64x64 |' in printed and 'x |' in printed
    results = json.loads((tmp_path / 'results.json').read_text())
    assert [r['model'] for r in results] == ['picodet-s-esnet', 'picodet-s-castling']
    assert all(r[key] > 0 for r in results for key in ('pytorch_ms', 'onnxruntime_1t_ms',
                                                       'onnxruntime_2t_ms'))
