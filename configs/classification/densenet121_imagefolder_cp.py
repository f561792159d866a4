# with_cp: one line on top of densenet121_imagefolder.py
_base_ = './densenet121_imagefolder.py'
model = dict(backbone=dict(with_cp=True))
