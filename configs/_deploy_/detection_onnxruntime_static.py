# mmdeploy deploy config of the project's detectors on ONNX Runtime, exported at the test pipeline's
# size: mmdeploy 1.3.1's configs/mmdet/detection/detection_onnxruntime_static.py with the project's
# deploy support. Use it with mmdeploy's own tools/deploy.py and tools/test.py
# (docs/user_guides/deployment.md).
_base_ = ['./_base_/onnxruntime.py']
onnx_config = dict(output_names=['dets', 'labels'], input_shape=None)
codebase_config = dict(
    type='mmdet', task='ObjectDetection', model_type='end2end',
    post_processing=dict(score_threshold=0.05, confidence_threshold=0.005, iou_threshold=0.5,
                         max_output_boxes_per_class=200, pre_top_k=5000, keep_top_k=100,
                         background_label_id=-1))
