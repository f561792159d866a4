# An ImageNet-style folder dataset: data/imagenet/{train,val}/<class>/<image>.
data = dict(
    samples_per_gpu=32,
    workers_per_gpu=2,
    train=dict(type='ImageFolderDataset', data_prefix='data/imagenet/train', img_size=224),
    val=dict(type='ImageFolderDataset', data_prefix='data/imagenet/val', img_size=224,
             test_mode=True),
    test=dict(type='ImageFolderDataset', data_prefix='data/imagenet/val', img_size=224,
              test_mode=True))
evaluation = dict(interval=1, metric='accuracy', metric_options=dict(topk=(1, 5)))
