# The reference RetinaNet-R50 VOC experiment's activation-checkpointing row (GTX 1660: 2590 MB,
# 8m37s): one line on top of the baseline. Only the backbone; the neck and head take
# with_cp=True too, or a top-level checkpoint_plan = {'*': 'full'} checkpoints every unit.
_base_ = './retinanet_r50_fpn_1x_voc0712.py'
model = dict(backbone=dict(with_cp=True))
