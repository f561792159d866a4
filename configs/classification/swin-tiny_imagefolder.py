_base_ = ['../_base_/datasets/imagefolder.py',
          '../_base_/schedules/imagenet_bs1024_adamw_swin.py', '../_base_/default_runtime.py']
model = dict(
    type='ImageClassifier',
    backbone=dict(type='SwinTransformer', arch='tiny', drop_path_rate=0.2, out_indices=(3, )),
    head=dict(type='LinearClsHead', num_classes=1000, in_channels=768, topk=(1, 5),
              label_smoothing=0.1))
