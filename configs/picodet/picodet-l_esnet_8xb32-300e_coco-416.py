# PP-PicoDet-L v1 at 416 (PaddleDetection `picodet_l_416_coco`): ESNet-L, 160-channel CSP-PAN and
# head, 4 depthwise-separable convs per level; the recipe of PicoDet-S at 416.
_base_ = './picodet-s_esnet_8xb32-300e_coco-416.py'

model = dict(
    backbone=dict(arch='l'), neck=dict(in_channels=[160, 320, 640], out_channels=160),
    bbox_head=dict(in_channels=160, stacked_convs=4))
