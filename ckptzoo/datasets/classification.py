"""Image classification datasets (mmcls 0.x ``BaseDataset`` contract, no pipeline).

Every item is ``dict(img=float CHW tensor (normalised), gt_label=int64 scalar tensor)``, so
torch's default collate gives ``dict(img=[B, C, H, W], gt_label=[B])``, which is what
``ImageClassifier.forward_train`` takes. ``evaluate`` returns mmcls's
``{'accuracy_top-1': percent, ...}``.
"""
import os

import numpy as np
import torch
from torch.utils.data import Dataset

from ..registry import DATASETS
from .sample_seed import sample_rng

__all__ = ['BaseClassificationDataset', 'SyntheticClassificationDataset',
           'ImageFolderDataset']

IMG_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.ppm', '.bmp', '.pgm', '.tif', '.tiff', '.webp')


class BaseClassificationDataset(Dataset):
    """Labels, classes and mmcls's accuracy evaluation; subclasses make the images."""

    CLASSES = None
    #: the ``metric`` values ``evaluate`` takes
    METRICS = ('accuracy', )

    def get_gt_labels(self):
        return np.asarray(self.gt_labels, dtype=np.int64)

    def __len__(self):
        return len(self.gt_labels)

    def evaluate(self, results, metric='accuracy', metric_options=None, indices=None,
                 logger=None):
        """Top-k accuracy in percent of ``results`` (one score vector per sample, in order).

        Args:
            metric (str | list[str]): only ``'accuracy'``.
            metric_options (dict): ``dict(topk=(1, 5))``; default ``topk=(1, )``.
            indices (list[int], optional): the dataset indices ``results`` belong to.
        """
        metrics = [metric] if isinstance(metric, str) else list(metric)
        if any(m not in self.METRICS for m in metrics):
            raise ValueError(f"metric must be 'accuracy', got {metric!r}")
        topk = (metric_options or {}).get('topk', (1, ))
        topk = (topk, ) if isinstance(topk, int) else tuple(topk)
        labels = self.get_gt_labels()
        if indices is not None:
            labels = labels[np.asarray(indices)]
        scores = np.stack([np.asarray(r, dtype=np.float64) for r in results])
        if scores.ndim != 2 or len(scores) != len(labels):
            raise ValueError(f'results must be {len(labels)} score vectors (one per sample), '
                             f'got shape {scores.shape}')
        if any(not isinstance(k, int) or not 1 <= k <= scores.shape[1] for k in topk):
            raise ValueError(f'topk must be ints in 1..{scores.shape[1]} (the number of '
                             f'classes), got {topk!r}')
        # stable sort: ties go to the lower class index, as torch.topk does on CPU
        order = np.argsort(-scores, axis=1, kind='stable')
        return {f'accuracy_top-{k}': float((order[:, :k] == labels[:, None]).any(1).mean()
                                           * 100.0) for k in topk}


def _class_colours(num_classes):
    """Evenly spaced hues, full saturation: far apart in RGB for a handful of classes."""
    hue = np.arange(num_classes) / num_classes * 6.0
    x = 1 - np.abs(hue % 2 - 1)
    zeros, ones = np.zeros_like(hue), np.ones_like(hue)
    table = [(ones, x, zeros), (x, ones, zeros), (zeros, ones, x), (zeros, x, ones),
             (x, zeros, ones), (ones, zeros, x)]
    sector = hue.astype(int) % 6
    rgb = np.stack([np.stack(table[s])[:, i] for i, s in enumerate(sector)])
    return torch.tensor(rgb, dtype=torch.float32)


@DATASETS.register_module()
class SyntheticClassificationDataset(BaseClassificationDataset):
    """Generated images for tests and smoke runs; the same ``seed`` gives the same data.

    Class ``k`` is a square of the k-th hue (evenly spaced hues) with stripes whose orientation
    alternates with ``k``, at a random place and size on a grey noisy background. Colour alone
    separates the classes, so a tiny CNN with global pooling learns them in a few dozen SGD
    steps. Each image is generated from ``(seed, index)``, so nothing is held in memory.

    Args:
        num_samples (int): dataset length.
        num_classes (int): number of classes (labels drawn uniformly from ``seed``).
        img_size (int): square image side in pixels.
        seed (int): base seed of labels and images.
        noise (float): std of the Gaussian pixel noise (pixels are in [0, 1] before it).
        mean, std (tuple[float]): per-channel normalisation of the [0, 1] image.
    """

    def __init__(self, num_samples=64, num_classes=4, img_size=32, seed=0, noise=0.1,
                 mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), test_mode=False):
        for name, value, low in (('num_samples', num_samples, 1), ('num_classes', num_classes, 2),
                                 ('img_size', img_size, 8)):
            if not isinstance(value, int) or value < low:
                raise ValueError(f'{name} must be an int >= {low}, got {value!r}')
        self.num_samples = num_samples
        self.num_classes = num_classes
        self.img_size = img_size
        self.seed = seed
        self.noise = float(noise)
        self.mean = torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(-1, 1, 1)
        self.test_mode = test_mode
        self.CLASSES = tuple(f'class_{k}' for k in range(num_classes))
        self.colours = _class_colours(num_classes)
        gen = torch.Generator().manual_seed(seed)
        self.gt_labels = torch.randint(num_classes, (num_samples, ), generator=gen).numpy()

    def _image(self, index, label):
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index + 1)
        size = self.img_size
        img = torch.full((3, size, size), 0.5) + self.noise * torch.randn(3, size, size,
                                                                          generator=gen)
        side = int(torch.randint(size // 3, size * 2 // 3 + 1, (1, ), generator=gen))
        y0, x0 = (int(v) for v in torch.randint(0, size - side + 1, (2, ), generator=gen))
        ramp = torch.arange(side)
        stripes = ((ramp // 2) % 2).float()
        stripes = stripes.view(-1, 1).expand(side, side) if label % 2 else \
            stripes.view(1, -1).expand(side, side)
        patch = self.colours[label].view(3, 1, 1) * (0.6 + 0.4 * stripes)
        img[:, y0:y0 + side, x0:x0 + side] = patch + self.noise * torch.randn(
            3, side, side, generator=gen)
        return (img.clamp(0, 1) - self.mean) / self.std

    def __getitem__(self, index):
        if not -len(self) <= index < len(self):
            raise IndexError(f'index {index} out of range for {len(self)} samples')
        index %= len(self)
        label = int(self.gt_labels[index])
        return dict(img=self._image(index, label),
                    gt_label=torch.tensor(label, dtype=torch.int64))


@DATASETS.register_module()
class ImageFolderDataset(BaseClassificationDataset):
    """A folder dataset (mmcls calls it CustomDataset; that name is mmdet's detection base here):
    ``data_prefix/<class>/<image>``, classes sorted by folder name.

    Instead of an mmcls pipeline it applies torchvision's standard ImageNet transforms: in
    training ``RandomResizedCrop(img_size)`` and a horizontal flip, in ``test_mode``
    ``Resize(img_size / 0.875)`` and ``CenterCrop(img_size)``; then ``ToTensor`` and
    ``Normalize(mean, std)`` (mean / std on the [0, 1] scale, ImageNet's by default).

    Args:
        data_prefix (str): root folder.
        img_size (int): output side in pixels.
        classes (sequence[str], optional): class folder names to use, in label order.
        extensions (tuple[str]): image file endings (case-insensitive).
    """

    def __init__(self, data_prefix, img_size=224, mean=(0.485, 0.456, 0.406),
                 std=(0.229, 0.224, 0.225), classes=None, test_mode=False,
                 extensions=IMG_EXTENSIONS):
        from torchvision import transforms as T
        if not os.path.isdir(data_prefix):
            raise FileNotFoundError(f'data_prefix {data_prefix!r} is not a folder')
        if not isinstance(img_size, int) or img_size < 1:
            raise ValueError(f'img_size must be a positive int, got {img_size!r}')
        found = sorted(d.name for d in os.scandir(data_prefix) if d.is_dir())
        classes = tuple(classes) if classes is not None else tuple(found)
        missing = [c for c in classes if c not in found]
        if missing or not classes:
            raise ValueError(f'class folders {missing or classes!r} not found under '
                             f'{data_prefix!r}; found {found!r}')
        self.data_prefix = data_prefix
        self.CLASSES = classes
        self.test_mode = test_mode
        extensions = tuple(e.lower() for e in extensions)
        self.samples = []
        for label, name in enumerate(classes):
            folder = os.path.join(data_prefix, name)
            for root, _, files in sorted(os.walk(folder, followlinks=True)):
                for f in sorted(files):
                    if f.lower().endswith(extensions):
                        self.samples.append((os.path.join(root, f), label))
        if not self.samples:
            raise ValueError(f'no images with extensions {extensions} under {data_prefix!r}')
        self.gt_labels = np.array([label for _, label in self.samples], dtype=np.int64)
        if test_mode:
            resize = [T.Resize(int(round(img_size / 0.875))), T.CenterCrop(img_size)]
        else:
            resize = [T.RandomResizedCrop(img_size), T.RandomHorizontalFlip()]
        self.transform = T.Compose(resize + [T.ToTensor(), T.Normalize(mean, std)])

    def __getitem__(self, index):
        """torchvision's random transforms draw from torch's global generator: a seeded
        index (:mod:`.sample_seed`) runs them under the sample's own seed."""
        from PIL import Image
        path, label = self.samples[index]
        with Image.open(path) as im, sample_rng(index):
            img = self.transform(im.convert('RGB'))
        return dict(img=img, gt_label=torch.tensor(label, dtype=torch.int64))
