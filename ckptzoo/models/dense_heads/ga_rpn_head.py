"""mmdet 2.x ``GARPNHead``: the guided-anchoring RPN (a 3x3 ``rpn_conv`` + ReLU before
:class:`GuidedAnchorHead`'s layers), the ``rpn_head`` of the GA Faster / RPN configs.
State-dict keys equal mmdet's; checkpoint units ``level{i}``."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...ops.nms import nms
from ...registry import MODELS, check_keys
from .guided_anchor_head import GuidedAnchorHead
from .rpn_head import RPNHead

__all__ = ['GARPNHead']


@MODELS.register_module()
class GARPNHead(GuidedAnchorHead):
    """Args: ``in_channels``, ``init_cfg`` (Normal std 0.01, the focal prior on
    ``conv_loc``); the rest as :class:`GuidedAnchorHead` (one foreground class).

    ``test_cfg`` (and the detector's ``train_cfg.rpn_proposal``): ``nms_pre`` (best kept
    positions per level before decoding; <= 0: all), ``min_bbox_size`` (proposals need width
    and height above it; negative keeps all), ``nms`` (``dict(type='nms', iou_threshold)``,
    per level), ``nms_post`` (kept per level after NMS), ``max_per_img``,
    ``nms_across_levels`` (one more NMS over all levels); mmdet's deprecated ``nms_thr`` /
    ``max_num`` are read as ``nms.iou_threshold`` / ``max_per_img``.
    """

    #: object vs background, whatever the dataset's classes (NumClassCheckHook skips it)
    CHECK_NUM_CLASSES = False

    TEST_CFG_KEYS = ('nms_pre', 'nms_post', 'max_per_img', 'nms', 'min_bbox_size',
                     'nms_across_levels', 'nms_thr', 'max_num')
    REQUIRED_TEST_CFG_KEYS = ('nms_pre', 'nms_post', 'min_bbox_size')

    def __init__(self, in_channels,
                 init_cfg=dict(type='Normal', layer='Conv2d', std=0.01,
                               override=dict(type='Normal', name='conv_loc', std=0.01,
                                             bias_prob=0.01)),
                 **kwargs):
        if 'num_classes' in kwargs:
            raise TypeError(f'GARPNHead scores one foreground class: num_classes is no argument '
                            f'of it, got num_classes={kwargs["num_classes"]!r}')
        super().__init__(1, in_channels, init_cfg=init_cfg, **kwargs)
        if self.test_cfg is not None:
            self.check_proposal_cfg(self.test_cfg, 'test_cfg')

    @classmethod
    def check_proposal_cfg(cls, cfg, where):
        """Fail on a proposal config mmdet's GARPNHead could not run, naming what is allowed;
        returns it with the deprecated keys resolved (a new dict)."""
        if not isinstance(cfg, dict):
            raise TypeError(f'{where} must be a dict, got {cfg!r}')
        check_keys(cfg, cls.TEST_CFG_KEYS, where, owner=cls.__name__)
        cfg = dict(cfg)
        missing = [k for k in cls.REQUIRED_TEST_CFG_KEYS if k not in cfg]
        if 'nms' not in cfg and 'nms_thr' not in cfg:
            missing.append('nms')
        if 'max_per_img' not in cfg and 'max_num' not in cfg:
            missing.append('max_per_img')
        if missing:
            raise ValueError(f'{where} of GARPNHead needs {", ".join(missing)} (e.g. '
                             f"nms_pre=1000, nms_post=1000, max_per_img=300, min_bbox_size=0, "
                             f"nms=dict(type='nms', iou_threshold=0.7)), got {cfg!r}")
        if 'nms' not in cfg:
            cfg['nms'] = dict(type='nms', iou_threshold=cfg['nms_thr'])
        nms_cfg = cfg['nms']
        if not isinstance(nms_cfg, dict) or 'iou_threshold' not in nms_cfg or \
                nms_cfg.get('type', 'nms') != 'nms':
            raise ValueError(f"{where}.nms must be dict(type='nms', iou_threshold=...) (GARPNHead "
                             f'only runs plain NMS), got {nms_cfg!r}')
        if 'nms_thr' in cfg and cfg['nms_thr'] != nms_cfg['iou_threshold']:
            raise ValueError(f"{where} sets nms_thr={cfg['nms_thr']} and nms.iou_threshold="
                             f"{nms_cfg['iou_threshold']}: give only nms")
        if 'max_num' in cfg:
            if 'max_per_img' in cfg and cfg['max_num'] != cfg['max_per_img']:
                raise ValueError(f"{where} sets max_num={cfg['max_num']} and max_per_img="
                                 f"{cfg['max_per_img']}: give only max_per_img")
            cfg['max_per_img'] = cfg['max_num']
        return cfg

    def _init_layers(self):
        self.rpn_conv = nn.Conv2d(self.in_channels, self.feat_channels, 3, padding=1)
        super()._init_layers()

    def forward_single(self, x):
        # ReLU not in place (mmdet's is): a 'selective' unit keeps the conv output
        return super().forward_single(F.relu(self.rpn_conv(x), inplace=False))

    def loss(self, cls_scores, bbox_preds, shape_preds, loc_preds, gt_bboxes, img_metas,
             gt_bboxes_ignore=None):
        """``dict(loss_rpn_cls, loss_rpn_bbox, loss_anchor_shape, loss_anchor_loc)``, each a
        list over levels; every assigned anchor is foreground."""
        losses = super().loss(cls_scores, bbox_preds, shape_preds, loc_preds, gt_bboxes, None,
                              img_metas, gt_bboxes_ignore=gt_bboxes_ignore)
        return dict(loss_rpn_cls=losses['loss_cls'], loss_rpn_bbox=losses['loss_bbox'],
                    loss_anchor_shape=losses['loss_shape'], loss_anchor_loc=losses['loss_loc'])

    def simple_test_rpn(self, x, img_metas):
        """Proposals of each image, ``[k, 5]`` (x1, y1, x2, y2, score), with ``test_cfg``."""
        return self.get_bboxes(*self(x), img_metas=img_metas)

    aug_test_rpn = RPNHead.aug_test_rpn

    def _get_bboxes_single(self, cls_scores, bbox_preds, mlvl_anchors, mlvl_masks, img_shape,
                           scale_factor, cfg, rescale=False):
        """mmdet's proposals of one image: per level the kept positions' ``nms_pre`` best,
        decoded and clipped, those not wider and taller than ``min_bbox_size`` dropped, NMS,
        the ``nms_post`` best; then over the levels NMS (``nms_across_levels``) or the best,
        at most ``max_per_img``. mmdet ignored ``rescale``; here it divides the proposals by
        ``scale_factor``. A softmax ``loss_cls`` scores the foreground logit (mmdet's
        GARPNHead failed on it)."""
        cfg = self.check_proposal_cfg(self.test_cfg if cfg is None else cfg, 'the proposal cfg')
        iou_threshold = cfg['nms']['iou_threshold']
        mlvl_proposals = []
        for cls_score, bbox_pred, anchors, mask in zip(cls_scores, bbox_preds, mlvl_anchors,
                                                       mlvl_masks):
            if mask.sum() == 0:
                continue
            cls_score = cls_score.permute(1, 2, 0)
            if self.use_sigmoid_cls:
                scores = cls_score.reshape(-1).sigmoid()
            else:
                scores = cls_score.reshape(-1, 2).softmax(dim=1)[:, 0]
            scores = scores[mask]
            bbox_pred = bbox_pred.permute(1, 2, 0).reshape(-1, 4)[mask, :]
            if cfg['nms_pre'] > 0 and scores.shape[0] > cfg['nms_pre']:
                _, topk = scores.topk(cfg['nms_pre'])
                bbox_pred, anchors, scores = bbox_pred[topk], anchors[topk], scores[topk]
            proposals = self.bbox_coder.decode(anchors, bbox_pred, max_shape=img_shape)
            if cfg['min_bbox_size'] >= 0:
                w = proposals[:, 2] - proposals[:, 0]
                h = proposals[:, 3] - proposals[:, 1]
                valid = (w > cfg['min_bbox_size']) & (h > cfg['min_bbox_size'])
                if not valid.all():
                    proposals, scores = proposals[valid], scores[valid]
            proposals, _ = nms(proposals, scores, iou_threshold)
            mlvl_proposals.append(proposals[:cfg['nms_post'], :])
        if not mlvl_proposals:
            return cls_scores[0].new_zeros(0, 5)
        proposals = torch.cat(mlvl_proposals, 0)
        if cfg.get('nms_across_levels', False):
            proposals, _ = nms(proposals[:, :4], proposals[:, -1], iou_threshold)
            proposals = proposals[:cfg['max_per_img'], :]
        else:
            num = min(cfg['max_per_img'], proposals.shape[0])
            _, topk = proposals[:, 4].topk(num)
            proposals = proposals[topk, :]
        if rescale:
            proposals = proposals.clone()
            proposals[:, :4] /= proposals.new_tensor(scale_factor)
        return proposals
