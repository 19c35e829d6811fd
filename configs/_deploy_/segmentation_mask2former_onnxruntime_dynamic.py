# mmdeploy deploy config of mmseg's Mask2Former (Mask2Former-Castling) on ONNX Runtime with dynamic
# shapes: segmentation_onnxruntime_dynamic.py at opset 13, the first with the einsum of mmdet's
# Mask2Former head (mmdeploy 1.3.1 has no deploy config of mmseg's Mask2Former). Its deformable
# attention runs on mmdeploy's ONNX Runtime custom ops (lib/libmmdeploy_onnxruntime_ops.so of the
# mmdeploy wheel, which mmdeploy's tools load).
_base_ = ['./segmentation_onnxruntime_dynamic.py']
onnx_config = dict(opset_version=13)
