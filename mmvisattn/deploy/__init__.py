"""Deployment: ONNX export with ONNX Runtime parity (:mod:`.onnx_export`); what mmdeploy needs is in
:mod:`.mmdeploy_support`, which only a deploy config imports (``configs/_deploy_/``), never this
package."""
from .onnx_export import (
                          FIXED_SIZE,
                          ExportError,
                          attention_sizes,
                          check_exportable,
                          check_opset,
                          check_shape,
                          export_onnx,
                          fixed_size_refusal,
                          onnxruntime_session,
                          parity_error,
                          quadratic_matmuls,
                          run_onnxruntime,
                          switch_to_deploy,
)

__all__ = ['FIXED_SIZE', 'ExportError', 'attention_sizes', 'check_exportable', 'check_opset',
           'check_shape', 'export_onnx', 'fixed_size_refusal', 'onnxruntime_session',
           'parity_error', 'quadratic_matmuls', 'run_onnxruntime', 'switch_to_deploy']
