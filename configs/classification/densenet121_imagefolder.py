_base_ = ['../_base_/datasets/imagefolder.py', '../_base_/schedules/imagenet_bs256.py',
          '../_base_/default_runtime.py']
model = dict(
    type='ImageClassifier',
    backbone=dict(type='DenseNet', arch='121'),
    head=dict(type='LinearClsHead', num_classes=1000, in_channels=1024, topk=(1, 5)))
