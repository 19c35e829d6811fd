# mmdeploy deploy config of the project's segmentors on ONNX Runtime, exported at the test
# pipeline's size: mmdeploy 1.3.1's configs/mmseg/segmentation_onnxruntime_static-512x512.py (its
# size left to the model config's test pipeline) with the project's deploy support.
_base_ = ['./_base_/onnxruntime.py']
onnx_config = dict(input_shape=None)
codebase_config = dict(type='mmseg', task='Segmentation', with_argmax=True)
