# The seeds' activation-checkpointing row: one line on top of the baseline.
_base_ = './retinanet_r50_fpn_1x_voc0712.py'
model = dict(backbone=dict(with_cp=True))
