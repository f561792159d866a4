# The minutes-on-a-CPU schedule of the synthetic COCO configs: AdamW, 12 epochs, a
# checkpoint and an evaluation every 4.
_base_ = '../default_runtime.py'

optimizer = dict(type='AdamW', lr=0.001, weight_decay=0.0001)
optimizer_config = dict(grad_clip=dict(max_norm=35, norm_type=2))
lr_config = dict(policy='step', warmup='linear', warmup_iters=100, warmup_ratio=0.01,
                 step=[9, 11])
runner = dict(type='EpochBasedRunner', max_epochs=12)
checkpoint_config = dict(interval=4, max_keep_ckpts=2)
log_config = dict(interval=16, hooks=[dict(type='TextLoggerHook')])
seed = 0
