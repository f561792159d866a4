# with_cp: one line on top of swin-tiny_imagefolder.py
_base_ = './swin-tiny_imagefolder.py'
model = dict(backbone=dict(with_cp=True))
