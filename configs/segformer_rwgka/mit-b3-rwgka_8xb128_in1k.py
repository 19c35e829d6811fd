# MiT-B3 with random-walk graph kernel attention ("Improving vision attention with random walk graph
# kernel", OpenReview, ICLR 2023; 64 anchors and lambda 0.5 as the segmentation configs) on
# ImageNet-1k at 224. The paper reports ImageNet for CvT / ViL-RWGKP, not MiT: no target. SegFormer
# pretrains MiT with PVT's recipe, which is DeiT's (300 epochs at batch 1024, drop path 0.1); the
# last stage's output norm, average pooling and a linear head.
_base_ = './mit-b0-rwgka_8xb128_in1k.py'

model = dict(backbone=dict(embed_dims=64, num_layers=[3, 4, 18, 3]), head=dict(in_channels=512))
