# The reference RetinaNet-R50 VOC experiment's accumulation row (GTX 1660: 3177 MB, 7m32s): one
# line on top of the baseline (same samples_per_gpu, so the
# effective batch doubles; halve samples_per_gpu to keep the baseline's effective batch).
_base_ = './retinanet_r50_fpn_1x_voc0712.py'
optimizer_config = dict(type='GradientCumulativeOptimizerHook', cumulative_iters=2)
