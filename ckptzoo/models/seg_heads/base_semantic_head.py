"""mmdet 2.x ``BaseSemanticHead``: a head that predicts per-pixel class logits from the
pyramid, with a per-pixel loss (``loss_seg``) and the test-time upsampling to image size.

At test time mmdet upsamples the logits of the whole batch at once to ``img_metas[0]``'s
shapes: ``N x C x H x W`` floats (plus as much again at the original size with ``rescale``),
and every image gets image 0's crop and size. Here each image is upsampled to its own shapes,
and :meth:`simple_test_labels` (what the panoptic detectors use) computes the per-pixel
arg-max a group of channels at a time: at most ``upsample_mem_limit`` bytes of upsampled
logits are alive at once (1 GiB by default; at least one channel), plus the running max and
arg-max and a chunk's (25 bytes a pixel of the output). The labels equal the arg-max of the
full logits.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from ...runner.checkpoint import load_checkpoint
from ...runner.fp16 import force_fp32
from ..checkpointing import CheckpointOwnerMixin
from ..utils import apply_init_cfg, interpolate_as

__all__ = ['BaseSemanticHead', 'SEG_UPSAMPLE_MEM_LIMIT']

SEG_UPSAMPLE_MEM_LIMIT = 1024**3  # bytes of upsampled logits alive at once at test time


class BaseSemanticHead(CheckpointOwnerMixin, nn.Module):
    """Args as mmdet 2.x: ``num_classes`` (the logits' channels), ``init_cfg``, ``loss_seg``
    (default ``CrossEntropyLoss(ignore_index=255)``).

    Subclasses implement ``forward(x) -> dict(seg_preds=(N, C, h, w), feats=...)``."""

    upsample_mem_limit = SEG_UPSAMPLE_MEM_LIMIT

    def __init__(self, num_classes, init_cfg=None,
                 loss_seg=dict(type='CrossEntropyLoss', ignore_index=255, loss_weight=1.0)):
        super().__init__()
        if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 1:
            raise ValueError(f'{type(self).__name__} num_classes must be a positive int, got '
                             f'{num_classes!r}')
        self.num_classes = num_classes
        self.init_cfg = init_cfg
        self.fp16_enabled = False
        self.loss_seg = MODELS.build(loss_seg)

    def _apply_init_cfg(self):
        apply_init_cfg(self, self.init_cfg)

    def init_weights(self):
        """A ``Pretrained`` init_cfg is loaded here; the other kinds were applied at
        construction."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_checkpoint(self, self.init_cfg['checkpoint'], map_location='cpu',
                            strict=False, prefix=self.init_cfg.get('prefix'))

    def forward(self, x):
        raise NotImplementedError(f'{type(self).__name__} implements no forward')

    @force_fp32(apply_to=('seg_preds', ))
    def loss(self, seg_preds, gt_semantic_seg):
        """``dict(loss_seg=...)``: ``loss_seg`` over every pixel of the (N, C, h, w) logits,
        resized (bilinear) to the (N, [1,] H, W) ground truth when their sizes differ."""
        if seg_preds.shape[-2:] != gt_semantic_seg.shape[-2:]:
            seg_preds = interpolate_as(seg_preds, gt_semantic_seg)
        seg_preds = seg_preds.permute(0, 2, 3, 1)
        loss_seg = self.loss_seg(seg_preds.reshape(-1, self.num_classes),
                                 gt_semantic_seg.reshape(-1).long())
        return dict(loss_seg=loss_seg)

    def forward_train(self, x, gt_semantic_seg):
        if gt_semantic_seg is None:
            raise ValueError(f'{type(self).__name__} needs gt_semantic_seg to train (the '
                             "pipeline's LoadPanopticAnnotations with with_seg=True and Collect "
                             "keys=[..., 'gt_semantic_seg'])")
        return self.loss(self.forward(x)['seg_preds'], gt_semantic_seg)

    @staticmethod
    def _upsample(seg_pred, meta, rescale):
        """One image's (c, h, w) logits at its padded input size, or (``rescale``) cropped to
        ``img_shape`` and resized to ``ori_shape``, bilinear as mmdet."""
        batch_hw = tuple(meta.get('batch_input_shape', meta['pad_shape'][:2]))
        out = F.interpolate(seg_pred[None], size=batch_hw, mode='bilinear',
                            align_corners=False)[0]
        if rescale:
            h, w = meta['img_shape'][:2]
            out = F.interpolate(out[None, :, :h, :w], size=tuple(meta['ori_shape'][:2]),
                                mode='bilinear', align_corners=False)[0]
        else:
            h, w = meta['pad_shape'][:2]
            out = out[:, :h, :w]
        return out

    def simple_test(self, x, img_metas, rescale=False):
        """mmdet's output: per image the (C, H, W) logits at its padded size, or at its
        original size with ``rescale`` (a list; mmdet's batched tensor indexes the same)."""
        seg_preds = self.forward(x)['seg_preds']
        return [self._upsample(seg_preds[i], meta, rescale) for i, meta in enumerate(img_metas)]

    def _channel_chunk(self, meta, rescale, element_size):
        batch_hw = tuple(meta.get('batch_input_shape', meta['pad_shape'][:2]))
        pixels = math.prod(batch_hw)
        if rescale:
            pixels += math.prod(meta['ori_shape'][:2])
        return max(1, int(self.upsample_mem_limit // (pixels * element_size)))

    def simple_test_labels(self, x, img_metas, rescale=False):
        """Per image the (H, W) int64 arg-max of :meth:`simple_test`'s logits, computed a
        chunk of channels at a time (at most ``upsample_mem_limit`` bytes of upsampled logits
        alive at once); ties go to the lower channel as ``argmax``."""
        seg_preds = self.forward(x)['seg_preds']
        results = []
        for i, meta in enumerate(img_metas):
            step = self._channel_chunk(meta, rescale, seg_preds.element_size())
            best, labels = None, None
            for start in range(0, seg_preds.size(1), step):
                logits = self._upsample(seg_preds[i, start:start + step], meta, rescale)
                value, index = logits.max(dim=0)
                if best is None:
                    best, labels = value, index
                else:  # in place: no second copy of the label map
                    better = value > best
                    torch.where(better, value, best, out=best)
                    torch.where(better, index.add_(start), labels, out=labels)
                del logits, value, index
            results.append(labels)
        return results
