"""mmdet 2.x ``RPNHead``: the region proposal network of Faster / Mask R-CNN.

One 3x3 conv (``rpn_conv``; ``num_convs > 1``: a stack of ConvModules) and ReLU, then 1x1
``rpn_cls`` (one foreground score per anchor) and ``rpn_reg``. State-dict keys equal mmdet's
(``rpn_conv.weight``, ``rpn_cls.bias``, ``rpn_reg.weight``, ...).

Checkpoint units (:mod:`ckptzoo.models.checkpointing`): ``level{i}``, one per pyramid level.
The proposals are made from detached outputs, so they keep nothing for backward.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.bbox import bbox_mapping_back
from ...ops.nms import nms
from ...registry import MODELS, check_keys
from ...utils.cfg_get import cfg_get
from ..utils import ConvModule
from .anchor_head import AnchorHead
from .level_units import LevelUnitsMixin

__all__ = ['RPNHead']


@MODELS.register_module()
class RPNHead(LevelUnitsMixin, AnchorHead):
    """RPN head (Ren et al. 2015), mmdet 2.x arguments.

    Args:
        in_channels (int): channels of each input level.
        init_cfg (dict): default Normal(std=0.01) on every Conv2d.
        num_convs (int): 3x3 convs before ``rpn_cls`` / ``rpn_reg``; more than one become
            ``rpn_conv.{i}.conv`` ConvModules (ReLU, not in place) as mmdet.
        with_cp (bool): ``'full'`` checkpointing of every level (not an mmdet 2.x argument;
            default False). ``set_checkpoint_plan`` changes modes later.
        cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.
        **kwargs: :class:`AnchorHead` arguments (feat_channels, anchor_generator, bbox_coder,
            loss_cls, loss_bbox, train_cfg, test_cfg). ``loss_cls`` with ``use_sigmoid=False``
            gives two logits per anchor (foreground first) scored by softmax.

    ``test_cfg`` (and the detector's ``train_cfg.rpn_proposal``): ``nms_pre`` (best anchors
    kept per level before decoding; absent or <= 0: all), ``min_bbox_size`` (proposals need
    width and height above it; a negative value keeps all; default 0, which drops empty
    boxes), ``nms`` (``dict(type='nms', iou_threshold=...)``, run per level), ``max_per_img``.
    """

    #: object vs background, whatever the dataset's classes (NumClassCheckHook skips it)
    CHECK_NUM_CLASSES = False

    TEST_CFG_KEYS = ('nms_pre', 'min_bbox_size', 'nms', 'max_per_img')
    REQUIRED_TEST_CFG_KEYS = ('nms', 'max_per_img')

    def __init__(self, in_channels, init_cfg=dict(type='Normal', layer='Conv2d', std=0.01),
                 num_convs=1, with_cp=False, cp_use_reentrant=False, **kwargs):
        if 'num_classes' in kwargs:
            raise TypeError(f'RPNHead scores one foreground class: num_classes is no argument '
                            f'of it, got num_classes={kwargs["num_classes"]!r}')
        if not (isinstance(num_convs, int) and num_convs >= 1):
            raise ValueError(f'num_convs must be a positive int, got {num_convs!r}')
        self.num_convs = num_convs
        super().__init__(1, in_channels, init_cfg=init_cfg, **kwargs)
        if self.test_cfg is not None:
            self.check_proposal_cfg(self.test_cfg, 'test_cfg')
        self._init_level_units(with_cp, cp_use_reentrant)

    @classmethod
    def check_proposal_cfg(cls, cfg, where):
        """Fail on a proposal config (``test_cfg`` or ``rpn_proposal``) that mmdet's RPNHead
        could not run (unknown or missing keys), naming what is allowed."""
        if not isinstance(cfg, dict):
            raise TypeError(f'{where} must be a dict, got {cfg!r}')
        check_keys(cfg, cls.TEST_CFG_KEYS, where, owner=cls.__name__)
        missing = [k for k in cls.REQUIRED_TEST_CFG_KEYS if k not in cfg]
        nms_cfg = cfg.get('nms')
        if 'nms' in cfg and not (isinstance(nms_cfg, dict) and ('iou_threshold' in nms_cfg
                                                                or 'iou_thr' in nms_cfg)):
            raise ValueError(f"{where}.nms must be a dict with an iou_threshold, e.g. "
                             f"dict(type='nms', iou_threshold=0.7), got {nms_cfg!r}")
        if missing:
            raise ValueError(f'{where} of RPNHead needs {" and ".join(missing)} (e.g. '
                             f"nms=dict(type='nms', iou_threshold=0.7), max_per_img=1000), got "
                             f'{dict(cfg)!r}')

    def _init_layers(self):
        if self.num_convs > 1:
            self.rpn_conv = nn.Sequential(*[
                ConvModule(self.in_channels if i == 0 else self.feat_channels,
                           self.feat_channels, 3, padding=1, inplace=False)
                for i in range(self.num_convs)])
        else:
            self.rpn_conv = nn.Conv2d(self.in_channels, self.feat_channels, 3, padding=1)
        self.rpn_cls = nn.Conv2d(self.feat_channels,
                                 self.num_base_priors * self.cls_out_channels, 1)
        self.rpn_reg = nn.Conv2d(self.feat_channels, self.num_base_priors * 4, 1)

    def forward_single(self, x):
        x = F.relu(self.rpn_conv(x), inplace=False)
        return self.rpn_cls(x), self.rpn_reg(x)

    def loss(self, cls_scores, bbox_preds, gt_bboxes, img_metas, gt_bboxes_ignore=None):
        """``dict(loss_rpn_cls=[per level], loss_rpn_bbox=[per level])``: every assigned
        anchor is foreground (label 0), whatever the class of its box."""
        losses = super().loss(cls_scores, bbox_preds, gt_bboxes, None, img_metas,
                              gt_bboxes_ignore=gt_bboxes_ignore)
        return dict(loss_rpn_cls=losses['loss_cls'], loss_rpn_bbox=losses['loss_bbox'])

    # ------------------------------------------------------------------ proposals
    def simple_test_rpn(self, x, img_metas):
        """Proposals of each image, ``[k, 5]`` (x1, y1, x2, y2, score), with ``test_cfg``."""
        return self.get_bboxes(*self(x), img_metas=img_metas)

    def _get_bboxes_single(self, cls_score_list, bbox_pred_list, score_factor_list,
                           mlvl_anchors, img_meta, cfg, rescale=False, with_nms=True, **kwargs):
        """mmdet 2.28's proposals of one image: per level the ``nms_pre`` best anchors, the
        boxes decoded and clipped to ``img_shape``, those not wider and taller than
        ``min_bbox_size`` dropped, NMS within each level (level ids as batched-NMS classes),
        the ``max_per_img`` best over all levels. ``[k, 5]`` (x1, y1, x2, y2, score).

        mmdet ignored ``rescale``; here ``rescale=True`` divides the proposals by
        ``scale_factor`` (what ``RPN.simple_test`` does). Proposals always go through NMS.
        """
        if not with_nms:
            raise NotImplementedError('RPNHead proposals always go through NMS (with_nms=False '
                                      'is not supported); use aug_test_rpn to merge '
                                      'augmentations')
        cfg = self.test_cfg if cfg is None else cfg
        if cfg is None:
            raise ValueError('RPNHead needs test_cfg (nms_pre, min_bbox_size, nms, '
                             'max_per_img) to make proposals')
        if cfg is not self.test_cfg:
            self.check_proposal_cfg(cfg, 'the proposal cfg')
        nms_pre = cfg_get(cfg, 'nms_pre', -1)
        mlvl_scores, mlvl_deltas, mlvl_anchors_kept, level_ids = [], [], [], []
        for level, (cls_score, bbox_pred, anchors) in enumerate(
                zip(cls_score_list, bbox_pred_list, mlvl_anchors)):
            if cls_score.shape[-2:] != bbox_pred.shape[-2:]:
                raise ValueError(f'level {level}: scores {tuple(cls_score.shape)} and box '
                                 f'deltas {tuple(bbox_pred.shape)} differ in size')
            cls_score = cls_score.permute(1, 2, 0)
            if self.use_sigmoid_cls:
                scores = cls_score.reshape(-1).sigmoid()
            else:  # foreground is class 0 (mmdet >= 2.5)
                scores = cls_score.reshape(-1, 2).softmax(dim=1)[:, 0]
            deltas = bbox_pred.permute(1, 2, 0).reshape(-1, 4)
            if nms_pre is not None and 0 < nms_pre < scores.shape[0]:
                scores, order = scores.sort(descending=True)
                scores, order = scores[:nms_pre], order[:nms_pre]
                deltas, anchors = deltas[order], anchors[order]
            mlvl_scores.append(scores)
            mlvl_deltas.append(deltas)
            mlvl_anchors_kept.append(anchors)
            level_ids.append(scores.new_full((scores.size(0), ), level, dtype=torch.long))
        scores = torch.cat(mlvl_scores)
        proposals = self.bbox_coder.decode(torch.cat(mlvl_anchors_kept), torch.cat(mlvl_deltas),
                                           max_shape=img_meta['img_shape'])
        ids = torch.cat(level_ids)
        min_bbox_size = cfg_get(cfg, 'min_bbox_size', 0)
        if min_bbox_size >= 0:
            wh = proposals[:, 2:] - proposals[:, :2]
            big = (wh > min_bbox_size).all(dim=1)
            proposals, scores, ids = proposals[big], scores[big], ids[big]
        if proposals.numel() == 0:
            return proposals.new_zeros(0, 5)
        dets, _ = self._nms(proposals, scores, ids, cfg)
        if rescale:
            dets[:, :4] /= dets.new_tensor(img_meta['scale_factor'])
        return dets

    def aug_test(self, feats, img_metas, rescale=False):
        raise NotImplementedError('RPNHead merges augmentations with aug_test_rpn')

    def aug_test_rpn(self, feats, img_metas):
        """mmdet 2.x: each augmentation's proposals mapped back to the original image, merged
        per image by one NMS over all of them (``test_cfg.nms``'s IoU), best first, at most
        ``max_per_img``. ``feats`` and ``img_metas`` are lists over augmentations."""
        if len(feats) != len(img_metas):
            raise ValueError(f'got {len(feats)} augmentations of features and '
                             f'{len(img_metas)} of img_metas')
        num_imgs = len(img_metas[0])
        per_image = [[] for _ in range(num_imgs)]
        for x, metas in zip(feats, img_metas):
            if len(metas) != num_imgs:
                raise ValueError(f'every augmentation needs {num_imgs} img_metas, got '
                                 f'{len(metas)}')
            for i, (proposals, meta) in enumerate(zip(self.simple_test_rpn(x, metas), metas)):
                proposals = proposals.clone()
                proposals[:, :4] = bbox_mapping_back(
                    proposals[:, :4], meta['img_shape'], meta['scale_factor'],
                    meta.get('flip', False), meta.get('flip_direction') or 'horizontal')
                per_image[i].append(proposals)
        nms_cfg = cfg_get(self.test_cfg, 'nms')
        iou_threshold = nms_cfg.get('iou_threshold', nms_cfg.get('iou_thr'))
        max_per_img = cfg_get(self.test_cfg, 'max_per_img')
        merged = []
        for proposals in per_image:
            proposals = torch.cat(proposals)
            dets, _ = nms(proposals[:, :4].contiguous(), proposals[:, 4].contiguous(),
                          iou_threshold)
            merged.append(dets[:max_per_img] if max_per_img > 0 else dets)
        return merged
