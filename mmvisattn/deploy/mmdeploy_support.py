"""What mmdeploy 1.3.1 needs from the pinned torch and from the project's ops, opt-in and visible.

mmdeploy's ``tools/deploy.py`` builds the model from its config, calls ``model.backbone.switch_to_deploy()``
(every backbone of the project has it: Castling's training-only softmax branches go) and exports through
``torch.onnx.export``. Two things stand in its way, and a deploy config that names this module in
``custom_imports`` (the project's deploy configs under ``configs/_deploy_/`` do) removes them:

* torch >= 2.9 exports with the dynamo exporter by default, which needs ``onnxscript`` and breaks
  mmdeploy's rewriters; ``torch.onnx.export`` here takes the TorchScript exporter (``dynamo=False``)
  unless its caller asks for the other (:data:`mmvisattn.compat.DEPLOY_PATCHES`);
* RWGK attention (SegFormer-RWGKA) solves an ``M x M`` system, ``aten::linalg_solve``, which has no
  standard ONNX operator; it is translated to ONNX Runtime's ``com.microsoft::Inverse`` and ``MatMul``
  from opset 11 (mmdeploy's) up. ONNX Runtime runs it; TensorRT, OpenVINO and ncnn have no ``Inverse``.

Importing the module logs one line saying what it changed. Nothing of this happens on ``import mmvisattn``.
"""
from mmengine.logging import print_log

import mmvisattn  # noqa: F401  (registers the models the deploy config's model config names)
from ..compat import APPLIED, DEPLOY_PATCHES, SKIP_VARIABLE, apply, export_onnx_with_torchscript
from .onnx_export import register_symbolics

# mmdeploy's deploy configs export at opset 11; the translation is registered from there up
MMDEPLOY_OPSET = 11
INVERSE_BACKENDS = ('onnxruntime',)


def enable() -> str:
    """Apply both (once); returns the line the import logs."""
    apply(*DEPLOY_PATCHES)
    register_symbolics(MMDEPLOY_OPSET)
    exporter = ('torch.onnx.export takes the TorchScript exporter (dynamo=False) unless asked otherwise'
                if export_onnx_with_torchscript.__name__ in APPLIED else
                f'torch.onnx.export as it is ({SKIP_VARIABLE} leaves export_onnx_with_torchscript out)')
    return (f'mmvisattn.deploy.mmdeploy_support: {exporter}; aten::linalg_solve exports as com.microsoft::Inverse + '
            f'MatMul from opset {MMDEPLOY_OPSET}, which only {", ".join(INVERSE_BACKENDS)} runs')


print_log(enable(), logger='current')
