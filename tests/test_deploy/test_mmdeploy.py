"""mmdeploy's own export (``mmdeploy.apis.torch2onnx``, what its ``tools/deploy.py`` calls) of one
model per family through the project's deploy configs (``configs/_deploy_/``): ONNX Runtime gives
what the PyTorch model gives through mmdeploy's rewriters (:func:`lab.deploy_benchmark.parity`), the
Castling models lose their training-only softmax branches on the way (mmdeploy calls
``model.backbone.switch_to_deploy()``), and a model traced for one map size refuses a dynamic deploy
config in one line. The metric both ways, through mmdeploy's ``tools/deploy.py`` and
``tools/test.py`` on trained demos: ``make bench-deploy``."""
from pathlib import Path

import pytest
import torch

from ..conftest import REPO

mmdeploy_apis = pytest.importorskip('mmdeploy.apis',
                                    reason='mmdeploy is not installed (make install installs it)')

from lab import deploy_benchmark as benchmark  # noqa: E402
from lab.deploy_benchmark import CASES, parity, random_checkpoint  # noqa: E402

pytestmark = pytest.mark.lab  # a check of the maintainers: make test-lab

# one demo per family (a case of make bench-deploy), random weights, at the demo's size
FAMILIES = ['smca-ripple', 'vil-retinanet', 'segformer-rwgka', 'castling-segformer',
            'picodet-castling', 'pervit-mask-rcnn', 'castling-vit-classifier']


def deploy_config(name: str, tmp_path: Path) -> str:
    """The case's deploy config, made to return what can be compared without ties: the logits
    (segmentation), every box above a zero score (detection, untrained)."""
    from mmengine.config import Config
    cfg = Config.fromfile(REPO / 'configs/_deploy_' / CASES[name].deploy)
    if cfg.codebase_config.type == 'mmseg':
        cfg.codebase_config.with_argmax = False
    elif cfg.codebase_config.type == 'mmdet':
        cfg.codebase_config.post_processing.update(score_threshold=0.0, keep_top_k=20)
    path = tmp_path / 'deploy.py'
    cfg.dump(path)
    return str(path)


def model_config(name: str, tmp_path: Path) -> str:
    return str(benchmark.model_config(CASES[name], tmp_path, REPO / 'configs'))


def demo_image(path: Path, size: int) -> str:
    return str(benchmark.random_image(path, size))


@pytest.mark.parametrize('name', FAMILIES)
def test_mmdeploy_exports_what_the_model_computes(name, tmp_path):
    deploy, config = deploy_config(name, tmp_path), model_config(name, tmp_path)
    model = random_checkpoint(deploy, config, tmp_path / 'model.pth')
    assert not any(getattr(module, 'has_aux_branch', False) for module in model.modules())
    image = demo_image(tmp_path / 'image.png', 64 if 'classifier' in name else 128)
    mmdeploy_apis.torch2onnx(image, str(tmp_path), 'end2end.onnx', deploy, config,
                             str(tmp_path / 'model.pth'), device='cpu')
    assert parity(deploy, config, str(tmp_path / 'model.pth'), str(tmp_path / 'end2end.onnx'),
                  image) < 1e-4


def test_a_model_of_one_map_size_refuses_a_dynamic_deploy_config(tmp_path):
    """ViL's sliding-chunk tables are constants of the graph: the dynamic config stops at once,
    naming the static one (exported at another size the graph would fail in ONNX Runtime)."""
    from mmvisattn.deploy import ExportError
    deploy = str(REPO / 'configs/_deploy_/detection_onnxruntime_dynamic.py')
    config = model_config('vil-retinanet', tmp_path)
    random_checkpoint(deploy, config, tmp_path / 'model.pth')
    with pytest.raises(ExportError,
                       match=r'^LongformerAttention exports for one input size only .*static '
                       r'deploy '
                                          r'config: configs/_deploy_/\*_onnxruntime_static.py\)$'):
        mmdeploy_apis.torch2onnx(demo_image(tmp_path / 'image.png', 128), str(tmp_path),
                                 'end2end.onnx', deploy,
                                 config, str(tmp_path / 'model.pth'), device='cpu')


def test_rwgk_exports_in_standard_onnx_for_backends_without_inverse(tmp_path):
    """For OpenVINO (and TensorRT, ncnn: every backend but ONNX Runtime) RWGK's solve exports as
    matrix products, no ``com.microsoft::Inverse``; the graph, run in ONNX Runtime, is float
    rounding away from the exact solve."""
    import onnx
    from mmengine.config import Config
    cfg = Config.fromfile(deploy_config('segformer-rwgka', tmp_path))
    cfg.backend_config = dict(type='openvino',
                              model_inputs=[dict(opt_shapes=dict(input=[1, 3, 128, 128]))])
    cfg.onnx_config.pop('dynamic_axes')
    deploy = str(tmp_path / 'openvino.py')
    cfg.dump(deploy)
    config = model_config('segformer-rwgka', tmp_path)
    random_checkpoint(deploy, config, tmp_path / 'model.pth')
    image = demo_image(tmp_path / 'image.png', 128)
    mmdeploy_apis.torch2onnx(image, str(tmp_path), 'end2end.onnx', deploy, config,
                             str(tmp_path / 'model.pth'), device='cpu')
    graph = onnx.load(str(tmp_path / 'end2end.onnx')).graph
    assert {node.domain for node in graph.node} == {''} and 'MatMul' in {
        node.op_type for node in graph.node
    }
    assert parity(deploy, config, str(tmp_path / 'model.pth'), str(tmp_path / 'end2end.onnx'),
                  image) < 1e-4


def test_attention_with_a_scale_exports_as_torch_computes_it():
    """mmdeploy 1.3.1's export form of ``F.scaled_dot_product_attention`` divides the scores by
    ``scale`` (PerViT's temperature): alone it is off, with the project's deploy support it is
    torch's."""
    import torch.nn.functional as F
    from mmdeploy.core import RewriterContext
    from mmdeploy.pytorch.functions.multi_head_attention_forward import (
        scaled_dot_product_attention__default,
    )

    import mmvisattn.deploy.mmdeploy_support  # noqa: F401
    q, k, v = torch.randn(3, 1, 2, 16, 8, generator=torch.Generator().manual_seed(0))
    bias = torch.randn(2, 16, 16)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3)
    assert not torch.allclose(scaled_dot_product_attention__default(q, k, v, bias, scale=0.3),
                              expected, atol=1e-3)
    eager = F.scaled_dot_product_attention
    with RewriterContext(cfg={}, backend='onnxruntime', opset=11):
        assert F.scaled_dot_product_attention is not eager  # the export form, not torch's kernel
        exported = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3)
    assert torch.allclose(exported, expected, atol=1e-6)


@pytest.mark.parametrize('opset', [11, 16])
def test_aligned_roi_align_exports_exactly_or_refuses(opset, tmp_path):
    """mmcv's ``RoIAlign(aligned=True)`` (every two-stage head) below opset 16 would export as
    ONNX's RoiAlign-10, which widens RoIs under one feature pixel: refused in one line; at 16 ONNX
    Runtime gives mmcv's values."""
    import onnxruntime
    from mmcv.ops import RoIAlign
    from mmdeploy.core import RewriterContext, patch_model
    from mmengine.config import Config

    from mmvisattn.deploy.onnx_export import ExportError
    deploy_cfg = Config.fromfile(REPO / 'configs/_deploy_/instance-seg_onnxruntime_static.py')
    deploy_cfg.onnx_config.opset_version = opset
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(1, 4, 16, 16, generator=generator)
    corners = torch.rand(24, 2, generator=generator) * 50
    # heights under 1 pixel at 1/4
    sides = torch.rand(24, 2, generator=generator) * torch.tensor([16.0, 2.0]) + 0.5
    rois = torch.cat([torch.zeros(24, 1), corners, corners + sides], 1)
    model = RoIAlign(7, 0.25, 2, aligned=True).eval()
    onnx_file = tmp_path / 'roi_align.onnx'
    with RewriterContext(cfg=deploy_cfg, backend='onnxruntime', opset=opset), torch.no_grad():
        patched = patch_model(model, cfg=deploy_cfg, backend='onnxruntime')
        if opset < 16:
            with pytest.raises(ExportError, match='exactly from opset 16, not 11: set '
                               'onnx_config.opset_version=16'):
                torch.onnx.export(patched, (features, rois), str(onnx_file), opset_version=opset,
                                  dynamo=False)
            return
        torch.onnx.export(patched, (features, rois), str(onnx_file), opset_version=opset,
                          dynamo=False, input_names=['features', 'rois'])
    session = onnxruntime.InferenceSession(str(onnx_file), providers=['CPUExecutionProvider'])
    out = session.run(None, {'features': features.numpy(), 'rois': rois.numpy()})[0]
    assert torch.allclose(torch.from_numpy(out), model(features, rois), atol=1e-5)
