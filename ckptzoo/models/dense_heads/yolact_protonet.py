"""mmdet 2.x ``YOLACTProtonet`` (in mmdet's ``yolact_head.py``): prototype masks from the first FPN
level, combined per detection by its coefficients (sigmoid of a dot product), cropped to its box,
the mask loss, and the test-time masks (upsampled in memory-bounded chunks).

Checkpoint unit: ``mask_head.protonet`` (the prototype network)."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ..checkpointing import CheckpointOwnerMixin, CheckpointUnit, unit_step
from ..roi_heads.mask_heads.fcn_mask_head import BYTES_PER_FLOAT, GPU_MEM_LIMIT
from ..utils import apply_init_cfg

__all__ = ['YOLACTProtonet', 'InterpolateModule']


class InterpolateModule(nn.Module):
    """``F.interpolate`` as a module (mmdet's), with the arguments given at construction."""

    def __init__(self, *args, init_cfg=None, **kwargs):
        super().__init__()
        self.args, self.kwargs = args, kwargs

    def forward(self, x):
        return F.interpolate(x, *self.args, **self.kwargs)


@MODELS.register_module()
class YOLACTProtonet(CheckpointOwnerMixin, nn.Module):
    """YOLACT's mask head: ``protonet`` (``proto_channels`` / ``proto_kernel_sizes``: a
    positive kernel is a conv, ``(None, -k)`` a bilinear x k upsampling, ``(c, -k)`` a
    deconv, each followed by a ReLU, the last one only with ``include_last_relu``) gives
    ``num_protos`` prototypes.

    Args:
        num_classes, in_channels, proto_channels, proto_kernel_sizes, include_last_relu,
        num_protos, loss_mask_weight, max_masks_to_train, init_cfg: as mmdet.
        with_cp (bool): ``'full'`` checkpointing of the protonet (not an mmdet argument).
        cp_use_reentrant (bool): torch's reentrant checkpoint.

    Fixes over mmdet 2.28.2: ``(c, -k)`` is a deconv of kernel and stride ``k`` (an upsampling
    by ``k`` like ``(None, -k)``; mmdet built it with padding ``-k // 2`` < 0, which torch
    refuses at the first forward); the test-time boxes are not divided in place (mmdet's
    ``simple_test`` normalised the caller's ``det_bboxes`` to [0, 1] when ``rescale=False``;
    its detector's bbox results, copied before, escaped); a reversed box is cropped between its two
    coordinates (mmdet's ``sanitize_coordinates`` made it empty).
    """

    def __init__(self, num_classes, in_channels=256,
                 proto_channels=(256, 256, 256, None, 256, 32),
                 proto_kernel_sizes=(3, 3, 3, -2, 3, 1), include_last_relu=True, num_protos=32,
                 loss_mask_weight=1.0, max_masks_to_train=100,
                 init_cfg=dict(type='Xavier', distribution='uniform',
                               override=dict(name='protonet')),
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if len(proto_channels) != len(proto_kernel_sizes) or not proto_channels:
            raise ValueError(f'proto_channels and proto_kernel_sizes need one entry per layer, '
                             f'got {proto_channels!r} and {proto_kernel_sizes!r}')
        if not (isinstance(max_masks_to_train, int) and max_masks_to_train > 0):
            raise ValueError(f'max_masks_to_train must be a positive int, got '
                             f'{max_masks_to_train!r}')
        if not isinstance(with_cp, bool):
            raise TypeError(f'YOLACTProtonet with_cp must be a bool, got {with_cp!r}')
        self.in_channels = in_channels
        self.proto_channels = proto_channels
        self.proto_kernel_sizes = proto_kernel_sizes
        self.include_last_relu = include_last_relu
        self.num_protos = num_protos
        self.num_classes = num_classes
        self.loss_mask_weight = loss_mask_weight
        self.max_masks_to_train = max_masks_to_train
        self.init_cfg = init_cfg
        self.fp16_enabled = False
        self.protonet = self._init_layers()
        self.protonet_unit = CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
        apply_init_cfg(self, init_cfg)

    def _init_layers(self):
        layers, channels = [], self.in_channels
        for num_channels, kernel in zip(self.proto_channels, self.proto_kernel_sizes):
            if not isinstance(kernel, int) or kernel == 0:
                raise ValueError(f'proto_kernel_sizes entries are non-zero ints (k > 0 a conv, '
                                 f'-k an upsampling by k), got {kernel!r}')
            if kernel > 0:
                if num_channels is None:
                    raise ValueError(f'a conv of proto_kernel_sizes {kernel} needs its '
                                     f'proto_channels, got None')
                layers.append(nn.Conv2d(channels, num_channels, kernel, padding=kernel // 2))
            elif num_channels is None:
                layers.append(InterpolateModule(scale_factor=-kernel, mode='bilinear',
                                                align_corners=False))
            else:
                layers.append(nn.ConvTranspose2d(channels, num_channels, -kernel,
                                                 stride=-kernel))
            layers.append(nn.ReLU(inplace=True))
            channels = channels if num_channels is None else num_channels
        if not self.include_last_relu:
            layers = layers[:-1]
        if channels != self.num_protos:
            raise ValueError(f'the last protonet layer gives {channels} channels, num_protos '
                             f'is {self.num_protos}')
        return nn.Sequential(*layers)

    def init_weights(self):
        """The init_cfg was applied at construction."""

    def _checkpoint_steps(self):
        return [[unit_step('protonet', self.protonet_unit, self.protonet)]]

    def forward_dummy(self, x):
        return self.protonet_unit(self.protonet, x, module=self.protonet)

    def forward(self, x, coeff_pred, bboxes, img_meta, sampling_results=None):
        """Per image ``[n, H, W]`` masks: the prototypes combined by each instance's
        coefficients, sigmoid, zero outside its box.

        Training (``sampling_results`` given, ``coeff_pred`` the head's per-level maps): one
        mask per positive anchor, cropped by its ground-truth box ``bboxes[i]``. Testing
        (``coeff_pred`` per image ``[n, num_protos]``): cropped by the detections ``bboxes``.
        """
        prototypes = self.forward_dummy(x).permute(0, 2, 3, 1)
        num_imgs = x.size(0)
        training = sampling_results is not None
        if training:
            coeff_pred = torch.cat([c.permute(0, 2, 3, 1).reshape(num_imgs, -1, self.num_protos)
                                    for c in coeff_pred], dim=1)
        masks = []
        for i in range(num_imgs):
            coeffs, boxes = coeff_pred[i], bboxes[i]
            if training:
                boxes = boxes[sampling_results[i].pos_assigned_gt_inds]
                coeffs = coeffs[sampling_results[i].pos_inds]
            h, w = img_meta[i]['img_shape'][:2]
            boxes = boxes[:, :4] / boxes.new_tensor([w, h, w, h])
            mask = torch.sigmoid(prototypes[i] @ coeffs.t())
            masks.append(self.crop(mask, boxes).permute(2, 0, 1).contiguous())
        return masks

    @force_fp32(apply_to=('mask_pred', ))
    def loss(self, mask_pred, gt_masks, gt_bboxes, img_meta, sampling_results):
        """``dict(loss_mask=[per image])``: per positive (at most ``max_masks_to_train`` per
        image, drawn at random) the mean binary cross entropy against its ground-truth mask at
        the prototypes' size, times ``loss_mask_weight``, divided by its box's area relative to
        the image; summed, over the batch's positives."""
        losses, total_pos = [], 0
        for pred, masks, boxes, meta, sampling in zip(mask_pred, gt_masks, gt_bboxes, img_meta,
                                                      sampling_results):
            gt_inds = sampling.pos_assigned_gt_inds
            num_pos = gt_inds.size(0)
            if num_pos > self.max_masks_to_train:
                select = torch.randperm(num_pos)[:self.max_masks_to_train]
                pred, gt_inds = pred[select], gt_inds[select]
                num_pos = self.max_masks_to_train
            total_pos += num_pos
            targets = self.get_targets(pred, masks.float(), gt_inds)
            if num_pos == 0 or targets is None:
                losses.append(pred.sum() * 0.)
                continue
            loss = F.binary_cross_entropy(torch.clamp(pred, 0, 1), targets, reduction='none')
            h, w = meta['img_shape'][:2]
            boxes = boxes[gt_inds]
            rel_w = (boxes[:, 2] - boxes[:, 0]) / w
            rel_h = (boxes[:, 3] - boxes[:, 1]) / h
            loss = (loss * self.loss_mask_weight).mean(dim=(1, 2)) / rel_w / rel_h
            losses.append(loss.sum())
        total_pos = max(total_pos, 1)
        return dict(loss_mask=[loss / total_pos for loss in losses])

    def get_targets(self, mask_pred, gt_masks, pos_assigned_gt_inds):
        """The positives' ground-truth masks resized (bilinear, > 0.5) to ``mask_pred``'s
        size; None for an image without objects."""
        if gt_masks.size(0) == 0:
            return None
        gt_masks = F.interpolate(gt_masks.unsqueeze(0), mask_pred.shape[-2:], mode='bilinear',
                                 align_corners=False).squeeze(0)
        return gt_masks.gt(0.5).to(mask_pred.dtype)[pos_assigned_gt_inds]

    def get_seg_masks(self, mask_pred, label_pred, img_meta, rescale):
        """Per class the binary uint8 masks ``[H, W]`` of ``ori_shape`` (``rescale``) or of the
        scaled image: bilinear upsampling, > 0.5.

        Memory: the masks are upsampled in chunks of at most ``GPU_MEM_LIMIT`` (1 GiB) of
        float32 upsampled masks (one mask per chunk when a single one is larger), on every
        device; mmdet upsampled all of an image's masks at once."""
        ori_h, ori_w = img_meta['ori_shape'][:2]
        scale_factor = img_meta['scale_factor']
        if rescale:
            img_h, img_w = ori_h, ori_w
        else:
            img_h = int(np.round(ori_h * scale_factor[1]))
            img_w = int(np.round(ori_w * scale_factor[0]))
        cls_segms = [[] for _ in range(self.num_classes)]
        num = mask_pred.size(0)
        if num == 0:
            return cls_segms
        per_chunk = max(1, GPU_MEM_LIMIT // (img_h * img_w * BYTES_PER_FLOAT))
        labels = label_pred.tolist()
        for start in range(0, num, per_chunk):
            chunk = F.interpolate(mask_pred[None, start:start + per_chunk], (img_h, img_w),
                                  mode='bilinear', align_corners=False)[0] > 0.5
            for m, label in zip(chunk.cpu().numpy().astype(np.uint8),
                                labels[start:start + per_chunk]):
                cls_segms[label].append(m)
        return cls_segms

    def crop(self, masks, boxes, padding=1):
        """``masks [H, W, n]`` zeroed outside each box (``boxes [n, 4]`` relative to the image,
        widened by ``padding`` pixels of the mask)."""
        h, w, _ = masks.size()
        x1, x2 = self.sanitize_coordinates(boxes[:, 0], boxes[:, 2], w, padding, cast=False)
        y1, y2 = self.sanitize_coordinates(boxes[:, 1], boxes[:, 3], h, padding, cast=False)
        cols = torch.arange(w, device=masks.device, dtype=x1.dtype).view(1, -1, 1)
        rows = torch.arange(h, device=masks.device, dtype=x1.dtype).view(-1, 1, 1)
        inside = (cols >= x1) & (cols < x2) & (rows >= y1) & (rows < y2)
        return masks * inside.to(masks.dtype)

    def sanitize_coordinates(self, x1, x2, img_size, padding=0, cast=True):
        """Relative coordinates to absolute ones (longs with ``cast``), ordered, widened by
        ``padding`` and clipped to ``[0, img_size]``."""
        x1, x2 = x1 * img_size, x2 * img_size
        if cast:
            x1, x2 = x1.long(), x2.long()
        lo, hi = torch.min(x1, x2), torch.max(x1, x2)
        return torch.clamp(lo - padding, min=0), torch.clamp(hi + padding, max=img_size)

    def simple_test(self, feats, det_bboxes, det_labels, det_coeffs, img_metas, rescale=False):
        """Per image, per class a list of uint8 masks (mmdet's ``segm_results``). Boxes given
        in the original image (``rescale``) are scaled back to the input image first."""
        if all(b.shape[0] == 0 for b in det_bboxes):
            return [[[] for _ in range(self.num_classes)] for _ in img_metas]
        boxes = [b[:, :4] * b.new_tensor(meta['scale_factor']) if rescale else b[:, :4]
                 for b, meta in zip(det_bboxes, img_metas)]
        mask_preds = self.forward(feats[0], det_coeffs, boxes, img_metas)
        return [[[] for _ in range(self.num_classes)] if b.shape[0] == 0 else
                self.get_seg_masks(m, labels, meta, rescale)
                for b, m, labels, meta in zip(det_bboxes, mask_preds, det_labels, img_metas)]
