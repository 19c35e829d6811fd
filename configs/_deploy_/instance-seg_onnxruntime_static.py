# mmdeploy deploy config of the project's instance segmentation models (Mask R-CNN) on ONNX Runtime, exported at
# the test pipeline's size: mmdeploy 1.3.1's configs/mmdet/instance-seg/instance-seg_onnxruntime_static.py with
# the project's deploy support.
_base_ = ['./detection_onnxruntime_static.py']
onnx_config = dict(output_names=['dets', 'labels', 'masks'])
codebase_config = dict(post_processing=dict(export_postprocess_mask=False))
