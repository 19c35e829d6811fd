"""mmdeploy's own export (``mmdeploy.apis.torch2onnx``, what its ``tools/deploy.py`` calls) of one model per
family with a training-only part or an op of its own, through the project's deploy configs
(``configs/_deploy_/``): ONNX Runtime gives what the PyTorch model gives through mmdeploy's rewriters, and the
Castling models lose their training-only softmax branches on the way (mmdeploy calls
``model.backbone.switch_to_deploy()``)."""
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch

from ..conftest import REPO

mmdeploy_apis = pytest.importorskip('mmdeploy.apis', reason='mmdeploy is not installed (make install installs it)')

CASES = {  # model config: (deploy config, what the ONNX graph returns)
    'picodet/picodet-s_castling_1xb16-600i_shapes-coco-128.py': 'detection',
    'segformer_rwgka/segformer_mit-b0-rwgka_1xb8-600i_shapes-cityscapes-128.py': 'segmentation',
    'castling/segformer-head_castling-levit-s_1xb8-600i_shapes-cityscapes-128.py': 'segmentation',
}


def deploy_config(task: str, tmp_path: Path) -> str:
    """The project's deploy config of ``task``, made to return what can be compared without ties: the logits
    (segmentation), every box above a zero score (detection, untrained)."""
    from mmengine.config import Config
    cfg = Config.fromfile(REPO / f'configs/_deploy_/{task}_onnxruntime_dynamic.py')
    if task == 'segmentation':
        cfg.codebase_config.with_argmax = False
    else:
        cfg.codebase_config.post_processing.update(score_threshold=0.0, keep_top_k=20)
    path = tmp_path / 'deploy.py'
    cfg.dump(path)
    return str(path)


@pytest.mark.parametrize('config', sorted(CASES))
def test_mmdeploy_exports_what_the_model_computes(config, tmp_path):
    import cv2
    from mmdeploy.apis.utils import build_task_processor
    from mmdeploy.core import RewriterContext, patch_model
    from mmdeploy.utils import load_config

    task = CASES[config]
    deploy = deploy_config(task, tmp_path)
    deploy_cfg, model_cfg = load_config(deploy, str(REPO / 'configs' / config))
    torch.manual_seed(0)
    processor = build_task_processor(model_cfg, deploy_cfg, 'cpu')
    model = processor.build_pytorch_model(None)
    assert not any(getattr(module, 'has_aux_branch', False) for module in model.modules())
    checkpoint = tmp_path / 'model.pth'
    torch.save({'state_dict': model.state_dict()}, checkpoint)
    image = tmp_path / 'image.png'
    cv2.imwrite(str(image), (np.random.default_rng(0).random((128, 128, 3)) * 255).astype(np.uint8))
    mmdeploy_apis.torch2onnx(str(image), str(tmp_path), 'end2end.onnx', deploy, str(REPO / 'configs' / config),
                             str(checkpoint), device='cpu')

    inputs = torch.randn(1, 3, 128, 128)
    with RewriterContext(cfg=deploy_cfg, backend='onnxruntime', opset=11), torch.no_grad():
        expected = patch_model(model, cfg=deploy_cfg, backend='onnxruntime')(inputs)
    session = onnxruntime.InferenceSession(str(tmp_path / 'end2end.onnx'), providers=['CPUExecutionProvider'])
    outputs = session.run(None, {'input': inputs.numpy()})
    if task == 'segmentation':
        assert np.abs(outputs[0] - expected.numpy()).max() < 1e-4 * max(1.0, np.abs(outputs[0]).max())
    else:  # the kept scores, sorted (boxes of equal scores may come in either order)
        scores, expected_scores = np.sort(outputs[0][0, :, 4]), np.sort(expected[0][0, :, 4].numpy())
        assert len(scores) == len(expected_scores) > 0
        assert np.abs(scores - expected_scores).max() < 1e-5
