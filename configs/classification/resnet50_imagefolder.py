_base_ = ['../_base_/datasets/imagefolder.py', '../_base_/schedules/imagenet_bs256.py',
          '../_base_/default_runtime.py']
model = dict(
    type='ImageClassifier',
    backbone=dict(type='ResNet', depth=50, out_indices=(3, ), norm_eval=False,
                  zero_init_residual=False),
    head=dict(type='LinearClsHead', num_classes=1000, in_channels=2048, topk=(1, 5)))
