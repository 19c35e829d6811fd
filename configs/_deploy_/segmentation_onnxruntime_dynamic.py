# mmdeploy deploy config of the project's segmentors on ONNX Runtime with dynamic shapes: mmdeploy
# 1.3.1's configs/mmseg/segmentation_onnxruntime_dynamic.py with the project's deploy support.
# Models whose attention is traced for one map size (PerViT) refuse it in one line: use the static
# config.
_base_ = ['./segmentation_onnxruntime_static.py']
onnx_config = dict(dynamic_axes=dict(input={0: 'batch', 2: 'height', 3: 'width'},
                                     output={0: 'batch', 2: 'height', 3: 'width'}))
