# with_cp: one line on top of resnet50_imagefolder.py
_base_ = './resnet50_imagefolder.py'
model = dict(backbone=dict(with_cp=True))
