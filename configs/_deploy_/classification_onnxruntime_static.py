# mmdeploy deploy config of the project's classifiers (the mmpretrain configs) on ONNX Runtime,
# exported at the test pipeline's size: mmdeploy 1.3.1's
# configs/mmpretrain/classification_onnxruntime_static.py with the project's deploy support.
_base_ = ['./_base_/onnxruntime.py']
onnx_config = dict(input_shape=None)
codebase_config = dict(type='mmpretrain', task='Classification')
