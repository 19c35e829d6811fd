# mmdeploy deploy config of the project's instance segmentation models (Mask R-CNN) on ONNX Runtime,
# exported at the test pipeline's size: mmdeploy 1.3.1's
# configs/mmdet/instance-seg/instance-seg_onnxruntime_static.py with the project's deploy support,
# at opset 16: the first whose RoiAlign has mmcv's aligned sampling (below it, RoIs under one
# feature pixel wide are widened to one, and the boxes and masks drift from the model's).
_base_ = ['./detection_onnxruntime_static.py']
onnx_config = dict(output_names=['dets', 'labels', 'masks'], opset_version=16)
codebase_config = dict(post_processing=dict(export_postprocess_mask=False))
