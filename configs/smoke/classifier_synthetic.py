# The fast smoke config: a tiny ResNet-18 classifier with all three memory savers on generated
# data. `python tools/train.py configs/smoke/classifier_synthetic.py` runs in seconds on a CPU.
_base_ = ['../_base_/default_runtime.py']

model = dict(
    type='ImageClassifier',
    backbone=dict(type='ResNet', depth=18, base_channels=8, norm_eval=False, with_cp=True,
                  zero_init_residual=False),
    head=dict(num_classes=4, topk=(1, )))
data = dict(
    samples_per_gpu=4,
    workers_per_gpu=0,
    train=dict(type='SyntheticClassificationDataset', num_samples=64, num_classes=4,
               img_size=32, seed=0),
    val=dict(type='SyntheticClassificationDataset', num_samples=32, num_classes=4, img_size=32,
             seed=1),
    test=dict(type='SyntheticClassificationDataset', num_samples=32, num_classes=4,
              img_size=32, seed=1))
optimizer = dict(type='SGD', lr=0.05, momentum=0.9, weight_decay=1e-4)
optimizer_config = dict(type='GradientCumulativeOptimizerHook', cumulative_iters=2,
                        grad_clip=dict(max_norm=10.))
fp16 = dict(loss_scale=512.)
lr_config = dict(policy='step', warmup='linear', warmup_iters=4, warmup_ratio=0.1, step=[4])
runner = dict(type='EpochBasedRunner', max_epochs=5)
evaluation = dict(interval=1, metric='accuracy', save_best='auto')
checkpoint_config = dict(interval=1, max_keep_ckpts=2)
log_config = dict(interval=8, hooks=[dict(type='TextLoggerHook')])
custom_hooks = [dict(type='NumClassCheckHook')]
seed = 0
