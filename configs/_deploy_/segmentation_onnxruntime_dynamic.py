# mmdeploy deploy config of the project's segmentors on ONNX Runtime with dynamic shapes: mmdeploy 1.3.1's
# configs/mmseg/segmentation_onnxruntime_dynamic.py with the project's deploy support. Use it with
# mmdeploy's own tools/deploy.py and tools/test.py (docs/user_guides/deployment.md).
_base_ = ['./_base_/onnxruntime.py']
onnx_config = dict(dynamic_axes=dict(input={0: 'batch', 2: 'height', 3: 'width'},
                                     output={0: 'batch', 2: 'height', 3: 'width'}))
codebase_config = dict(type='mmseg', task='Segmentation', with_argmax=True)
