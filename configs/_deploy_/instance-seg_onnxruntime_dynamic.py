# mmdeploy deploy config of the project's instance segmentation models on ONNX Runtime with dynamic
# shapes: mmdeploy 1.3.1's configs/mmdet/instance-seg/instance-seg_onnxruntime_dynamic.py with the
# project's deploy support. Models whose attention is traced for one map size (ViL, PerViT) refuse
# it: use the static config.
_base_ = ['./instance-seg_onnxruntime_static.py']
onnx_config = dict(
    dynamic_axes=dict(input={0: 'batch', 2: 'height', 3: 'width'}, dets={0: 'batch', 1: 'num_dets'},
                      labels={0: 'batch', 1: 'num_dets'},
                      masks={0: 'batch', 1: 'num_dets', 2: 'height', 3: 'width'}))
