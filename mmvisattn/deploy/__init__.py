"""Deployment: ONNX export with ONNX Runtime parity (:mod:`.onnx_export`)."""
from .onnx_export import (UNEXPORTABLE, ExportError, attention_sizes, check_exportable, check_opset, check_shape,
                          export_onnx, onnxruntime_session, parity_error, quadratic_matmuls, run_onnxruntime,
                          switch_to_deploy)

__all__ = ['UNEXPORTABLE', 'ExportError', 'attention_sizes', 'check_exportable', 'check_opset', 'check_shape',
           'export_onnx', 'onnxruntime_session', 'parity_error', 'quadratic_matmuls', 'run_onnxruntime',
           'switch_to_deploy']
