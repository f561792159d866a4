"""mmdet 2.x ``FCNMaskHead`` (Mask R-CNN's mask branch): ``num_convs`` 3x3 ConvModules, a 2x
upsample (a stride-2 deconv by default), a 1x1 ``conv_logits`` with one channel per class.

State-dict keys equal mmdet's (``convs.0.conv.weight``, ``upsample.weight``,
``conv_logits.bias``), so mmdet 2.x Mask R-CNN checkpoints load. Training targets come from
:func:`ckptzoo.core.mask.mask_target`; test-time masks are pasted into the image as mmdet's
``_do_paste_mask`` (bilinear ``grid_sample`` of each RoI's mask over the pixel centres).
"""
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.utils import _pair

from ....core.mask import mask_target
from ....ops import CARAFEPack
from ....registry import MODELS
from ....runner.fp16 import auto_fp16, force_fp32
from ....utils.cfg_get import cfg_get
from ...utils import ConvModule, build_conv_layer

__all__ = ['FCNMaskHead', 'paste_masks', 'BYTES_PER_FLOAT', 'GPU_MEM_LIMIT']

BYTES_PER_FLOAT = 4
GPU_MEM_LIMIT = 1024**3  # the pasted masks of one chunk on a GPU, as mmdet (1 GiB)

UPSAMPLE_METHODS = (None, 'deconv', 'nearest', 'bilinear', 'carafe')
PREDICTOR_TYPES = ('Conv', 'Conv2d', 'NormedConv2d')


def _build_upsample(cfg, method, scale_factor, in_channels, out_channels):
    """mmcv's ``build_upsample_layer`` for the methods the mask head accepts."""
    if method is None:
        return None
    if scale_factor is None:
        raise ValueError(f'FCNMaskHead upsample_cfg {method!r} needs a scale_factor')
    try:
        if method == 'carafe':  # CARAFE mask head (carafe/ configs): initialised by itself
            return CARAFEPack(in_channels, scale_factor, **cfg)
        if method == 'deconv':
            return nn.ConvTranspose2d(in_channels, out_channels, kernel_size=scale_factor,
                                      stride=scale_factor, **cfg)
        # mmdet sets mode and align_corners itself (None / False) over the config's; the
        # same values are accepted, others refused rather than silently replaced
        cfg = dict(cfg)
        fixed = dict(mode=method, align_corners=None if method == 'nearest' else False)
        for key, value in fixed.items():
            given = cfg.pop(key, value)
            if given != value:
                raise ValueError(f'FCNMaskHead upsample_cfg {method!r} always uses '
                                 f'{key}={value!r} (as mmdet), got {key}={given!r}')
        return nn.Upsample(scale_factor=scale_factor, **fixed, **cfg)
    except TypeError as err:
        raise ValueError(f'FCNMaskHead upsample_cfg {method!r} got an argument it does not '
                         f'take: {sorted(cfg)} ({err})') from None


def _build_predictor(cfg, in_channels, out_channels):
    if not isinstance(cfg, dict) or cfg.get('type') not in PREDICTOR_TYPES:
        raise NotImplementedError(f'FCNMaskHead predictor_cfg supports type '
                                  f'{" or ".join(PREDICTOR_TYPES)}, got {cfg!r}')
    return build_conv_layer(cfg, in_channels, out_channels, 1)


@MODELS.register_module()
class FCNMaskHead(nn.Module):
    """Args as mmdet 2.x.

    Args:
        num_convs (int), conv_kernel_size (int), conv_out_channels (int), conv_cfg,
        norm_cfg: the 3x3 conv tower (``convs.{i}``).
        roi_feat_size (int | tuple): kept for config compatibility; unused (as mmdet).
        in_channels (int): channels of the RoI features.
        num_classes (int): one output channel per class (no background channel).
        class_agnostic (bool): one output channel for every class.
        upsample_cfg (dict): ``type`` one of None, 'deconv' (ConvTranspose2d with kernel and
            stride ``scale_factor``, followed by a ReLU), 'nearest', 'bilinear' or 'carafe'
            (``CARAFEPack``, plain PyTorch). Other keys go to the layer.
        predictor_cfg (dict): the ``conv_logits`` layer, ``dict(type='Conv')``.
        loss_mask (dict): default ``CrossEntropyLoss(use_mask=True)``.
        init_cfg: must be None (as mmdet); the deconv and ``conv_logits`` get Kaiming normal
            (fan_out, ReLU) weights and zero biases, the convs ConvModule's init.
    """

    def __init__(self, num_convs=4, roi_feat_size=14, in_channels=256, conv_kernel_size=3,
                 conv_out_channels=256, num_classes=80, class_agnostic=False,
                 upsample_cfg=dict(type='deconv', scale_factor=2), conv_cfg=None, norm_cfg=None,
                 predictor_cfg=dict(type='Conv'),
                 loss_mask=dict(type='CrossEntropyLoss', use_mask=True, loss_weight=1.0),
                 init_cfg=None):
        super().__init__()
        if init_cfg is not None:
            raise ValueError(f'FCNMaskHead takes no init_cfg (its layers have a fixed '
                             f'initialisation, as mmdet), got {init_cfg!r}')
        if not isinstance(upsample_cfg, dict) or 'type' not in upsample_cfg:
            raise ValueError(f"upsample_cfg must be a dict with a 'type' (None for no "
                             f'upsampling), got {upsample_cfg!r}')
        if upsample_cfg['type'] not in UPSAMPLE_METHODS:
            raise ValueError(f'Invalid upsample method {upsample_cfg["type"]!r}, accepted '
                             f'methods are "deconv", "nearest", "bilinear", "carafe" or None')
        for name, value in (('num_convs', num_convs), ('num_classes', num_classes)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f'{name} must be a non-negative int, got {value!r}')
        self.upsample_cfg = dict(upsample_cfg)
        self.num_convs = num_convs
        self.roi_feat_size = _pair(roi_feat_size)  # unused, as mmdet
        self.in_channels = in_channels
        self.conv_kernel_size = conv_kernel_size
        self.conv_out_channels = conv_out_channels
        self.upsample_method = self.upsample_cfg.pop('type')
        self.scale_factor = self.upsample_cfg.pop('scale_factor', None)
        self.num_classes = num_classes
        self.class_agnostic = class_agnostic
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.predictor_cfg = predictor_cfg
        self.fp16_enabled = False
        self.loss_mask = MODELS.build(loss_mask)

        self.convs = nn.ModuleList()
        padding = (conv_kernel_size - 1) // 2
        for i in range(num_convs):
            self.convs.append(ConvModule(in_channels if i == 0 else conv_out_channels,
                                         conv_out_channels, conv_kernel_size, padding=padding,
                                         conv_cfg=conv_cfg, norm_cfg=norm_cfg))
        upsample_in_channels = conv_out_channels if num_convs > 0 else in_channels
        self.upsample = _build_upsample(self.upsample_cfg, self.upsample_method,
                                        self.scale_factor, upsample_in_channels,
                                        conv_out_channels)
        logits_in_channels = conv_out_channels if self.upsample_method == 'deconv' \
            else upsample_in_channels
        self.conv_logits = _build_predictor(predictor_cfg, logits_in_channels,
                                            1 if class_agnostic else num_classes)
        self.relu = nn.ReLU(inplace=True)
        self.debug_imgs = None
        self._init_predictors()

    def _init_predictors(self):
        for m in (self.upsample, self.conv_logits):
            if getattr(m, 'weight', None) is not None and getattr(m, 'bias', None) is not None:
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
                nn.init.constant_(m.bias, 0)

    def init_weights(self):
        """The layers were initialised at construction; there is no ``init_cfg`` to load."""

    @auto_fp16()
    def forward(self, x):
        """(n, in_channels, h, w) RoI features -> (n, classes, h * s, w * s) mask logits."""
        return self._mask_logits(x)

    def _mask_logits(self, x):
        """The convs, the upsampling and ``conv_logits`` (shared with heads that first mix
        the RoI features with something else, e.g. ``DynamicMaskHead``)."""
        for conv in self.convs:
            x = conv(x)
        if self.upsample is not None:
            x = self.upsample(x)
            if self.upsample_method == 'deconv':
                x = self.relu(x)
        return self.conv_logits(x)

    def get_targets(self, sampling_results, gt_masks, rcnn_train_cfg):
        """The (n_pos, h, w) targets of every image's positive proposals, concatenated."""
        return mask_target([res.pos_bboxes for res in sampling_results],
                           [res.pos_assigned_gt_inds for res in sampling_results], gt_masks,
                           rcnn_train_cfg)

    @force_fp32(apply_to=('mask_pred', ))
    def loss(self, mask_pred, mask_targets, labels):
        """``dict(loss_mask=...)``; with no positive RoI, ``mask_pred.sum()`` (zero, and still
        connected to the graph)."""
        if mask_pred.size(0) == 0:
            return dict(loss_mask=mask_pred.sum())
        if self.class_agnostic:
            labels = torch.zeros_like(labels)
        return dict(loss_mask=self.loss_mask(mask_pred, mask_targets, labels))

    def get_seg_masks(self, mask_pred, det_bboxes, det_labels, rcnn_test_cfg, ori_shape,
                      scale_factor, rescale):
        """Each detection's mask pasted into the image, grouped by class.

        Args:
            mask_pred (Tensor | ndarray): (n, classes, h, w) logits, or probabilities already
                (an ndarray, from test-time augmentation).
            det_bboxes (Tensor): (n, 4 or 5) boxes in the network input's scale.
            det_labels (Tensor): (n, ) classes.
            rcnn_test_cfg (dict): ``mask_thr_binary``: a probability threshold; below 0 the
                masks are uint8 probabilities x 255 instead of bool.
            ori_shape (tuple): the original image's (h, w, ...).
            scale_factor (Tensor | ndarray | float): (w, h, w, h) factors of the resize.
            rescale (bool): paste into the original image (boxes divided by ``scale_factor``),
                else into the resized image (``ori_shape`` times the factors, rounded).

        Returns:
            list[list[ndarray]]: per class, the (H, W) masks of its detections in order.
        """
        if isinstance(mask_pred, torch.Tensor):
            mask_pred = mask_pred.sigmoid()
        else:
            mask_pred = det_bboxes.new_tensor(mask_pred)
        device = mask_pred.device
        cls_segms = [[] for _ in range(self.num_classes)]
        bboxes = det_bboxes[:, :4]
        labels = det_labels
        if not isinstance(scale_factor, torch.Tensor):
            if isinstance(scale_factor, float):
                warnings.warn('scale_factor should be a Tensor or ndarray with shape (4,); a '
                              'float is deprecated')
                scale_factor = np.array([scale_factor] * 4)
            if not isinstance(scale_factor, np.ndarray):
                raise TypeError(f'scale_factor must be a Tensor, an ndarray (w, h, w, h) or a '
                                f'float, got {type(scale_factor).__name__}')
            scale_factor = torch.tensor(scale_factor, dtype=torch.float32)
        if rescale:
            img_h, img_w = ori_shape[:2]
            bboxes = bboxes / scale_factor.to(bboxes)
        else:
            w_scale, h_scale = scale_factor[0], scale_factor[1]
            img_h = int(np.round(ori_shape[0] * h_scale.item()).astype(np.int32))
            img_w = int(np.round(ori_shape[1] * w_scale.item()).astype(np.int32))
        threshold = cfg_get(rcnn_test_cfg, 'mask_thr_binary')
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise ValueError(f'the rcnn test_cfg needs mask_thr_binary (a number, 0.5 for '
                             f'Mask R-CNN) to make masks, got {rcnn_test_cfg!r}')
        num = len(mask_pred)
        if num == 0:  # mmdet fails on torch.chunk(..., 0); no detection, no mask
            return cls_segms
        im_mask = torch.zeros(num, img_h, img_w, device=device,
                              dtype=torch.bool if threshold >= 0 else torch.uint8)
        if not self.class_agnostic:
            mask_pred = mask_pred[torch.arange(num, device=device), labels.long()][:, None]
        for inds in _paste_chunks(num, img_h, img_w, device):
            masks_chunk, spatial_inds = paste_masks(mask_pred[inds], bboxes[inds], img_h, img_w,
                                                    skip_empty=device.type == 'cpu')
            if threshold >= 0:
                masks_chunk = masks_chunk >= threshold
            else:  # for visualisation and debugging, as mmdet
                masks_chunk = (masks_chunk * 255).to(dtype=torch.uint8)
            im_mask[(inds, ) + spatial_inds] = masks_chunk
        for i in range(num):
            cls_segms[int(labels[i])].append(im_mask[i].detach().cpu().numpy())
        return cls_segms


def _paste_chunks(num, img_h, img_w, device):
    """mmdet's chunking: one mask at a time on CPU (each pasted into its boxes' region only);
    on a GPU chunks of at most ``GPU_MEM_LIMIT`` bytes of pasted masks. mmdet fails when one
    image-sized mask alone exceeds the limit; here such masks go one at a time."""
    if device.type == 'cpu':
        num_chunks = num
    else:
        num_chunks = min(num, int(np.ceil(num * int(img_h) * int(img_w) * BYTES_PER_FLOAT /
                                          GPU_MEM_LIMIT)))
    return torch.chunk(torch.arange(num, device=device), max(num_chunks, 1))


def paste_masks(masks, boxes, img_h, img_w, skip_empty=True):
    """mmdet's ``_do_paste_mask``: (n, 1, h, w) masks bilinearly sampled at the pixel centres
    of their (n, 4) boxes in an ``img_h`` x ``img_w`` image (zero outside the box).

    With ``skip_empty`` only the region bounding every box (plus one pixel) is computed and
    ``(masks (n, h', w'), (row slice, column slice))`` is returned; else whole images and ().
    """
    device = masks.device
    if skip_empty:
        x0_int, y0_int = torch.clamp(boxes.min(dim=0).values.floor()[:2] - 1,
                                     min=0).to(dtype=torch.int32)
        x1_int = torch.clamp(boxes[:, 2].max().ceil() + 1, max=img_w).to(dtype=torch.int32)
        y1_int = torch.clamp(boxes[:, 3].max().ceil() + 1, max=img_h).to(dtype=torch.int32)
        # boxes beyond the image give an empty region (mmdet fails on the reversed range)
        x1_int, y1_int = torch.maximum(x1_int, x0_int), torch.maximum(y1_int, y0_int)
    else:
        x0_int, y0_int = 0, 0
        x1_int, y1_int = img_w, img_h
    x0, y0, x1, y1 = torch.split(boxes, 1, dim=1)  # each (n, 1)
    num = masks.shape[0]
    img_y = torch.arange(y0_int, y1_int, device=device).to(torch.float32) + 0.5
    img_x = torch.arange(x0_int, x1_int, device=device).to(torch.float32) + 0.5
    img_y = (img_y - y0) / (y1 - y0) * 2 - 1  # (n, h')
    img_x = (img_x - x0) / (x1 - x0) * 2 - 1  # (n, w')
    img_x[torch.isinf(img_x)] = 0  # a zero-width box
    img_y[torch.isinf(img_y)] = 0
    gx = img_x[:, None, :].expand(num, img_y.size(1), img_x.size(1))
    gy = img_y[:, :, None].expand(num, img_y.size(1), img_x.size(1))
    grid = torch.stack([gx, gy], dim=3)
    img_masks = F.grid_sample(masks.to(dtype=torch.float32), grid.to(dtype=torch.float32),
                              align_corners=False)
    if skip_empty:
        return img_masks[:, 0], (slice(int(y0_int), int(y1_int)), slice(int(x0_int),
                                                                         int(x1_int)))
    return img_masks[:, 0], ()
