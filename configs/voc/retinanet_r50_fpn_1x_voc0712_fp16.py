# The reference RetinaNet-R50 VOC experiment's FP16 row (GTX 1660: 2243 MB, 36 min; that GPU has
# no tensor cores): one line on top of the baseline.
_base_ = './retinanet_r50_fpn_1x_voc0712.py'
fp16 = dict(loss_scale=512.)
