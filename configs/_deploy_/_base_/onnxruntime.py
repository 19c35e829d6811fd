# What the project's mmdeploy deploy configs share: mmdeploy 1.3.1's ONNX export settings and ONNX
# Runtime backend (its configs/_base_/onnx_config.py and backends/onnxruntime.py), and the project's
# deploy support (mmvisattn.deploy.mmdeploy_support: the TorchScript exporter, RWGK's solve).
custom_imports = dict(imports=['mmvisattn.deploy.mmdeploy_support'], allow_failed_imports=False)
onnx_config = dict(type='onnx', export_params=True, keep_initializers_as_inputs=False,
                   opset_version=11,
                   save_file='end2end.onnx', input_names=['input'], output_names=['output'],
                   input_shape=None, optimize=True)
backend_config = dict(type='onnxruntime')
