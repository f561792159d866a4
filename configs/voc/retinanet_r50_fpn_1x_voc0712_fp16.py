# The seeds' FP16 row: one line on top of the baseline.
_base_ = './retinanet_r50_fpn_1x_voc0712.py'
fp16 = dict(loss_scale=512.)
