# All three memory savers together (GradientCumulativeFp16OptimizerHook is picked for you).
_base_ = './retinanet_r50_fpn_1x_voc0712.py'
model = dict(backbone=dict(with_cp=True))
fp16 = dict(loss_scale=512.)
optimizer_config = dict(type='GradientCumulativeOptimizerHook', cumulative_iters=2)
