# mask-rcnn_vil-small_fpn_ms-3x_coco.py trained with random shifting (arXiv:2103.15358, App. D):
# each training step every attention attends to its own chunk and one randomly drawn neighbour chunk
# (mode 1), and after 75 % of the iterations all eight neighbours (mode 0, the inference layout), so
# the last quarter fine-tunes the model that is tested. Same weights and test-time function.
_base_ = './mask-rcnn_vil-small_fpn_ms-3x_coco.py'

model = dict(backbone=dict(attn_cfg=dict(type='LongformerAttention', mode=1)))
custom_hooks = [*_base_.custom_hooks, dict(type='ViLRandomShiftHook', switch_at=0.75)]
