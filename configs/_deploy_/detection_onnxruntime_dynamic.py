# mmdeploy deploy config of the project's detectors on ONNX Runtime with dynamic shapes: mmdeploy
# 1.3.1's configs/mmdet/detection/detection_onnxruntime_dynamic.py with the project's deploy
# support. Models whose attention is traced for one map size (ViL, SMCA, PerViT) refuse it in one
# line: use the static config.
_base_ = ['./detection_onnxruntime_static.py']
onnx_config = dict(
    dynamic_axes=dict(input={0: 'batch', 2: 'height', 3: 'width'}, dets={0: 'batch', 1: 'num_dets'},
                      labels={0: 'batch', 1: 'num_dets'}))
