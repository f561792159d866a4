"""mmdet 2.x ``YOLOFHead`` (Chen et al. 2021, You Only Look One-level Feature): one level; a
classification subnet and a box subnet whose implicit objectness normalises the class scores
(``cls + obj - log(1 + e^cls + e^obj)``); targets by ``UniformAssigner``, the box loss (GIoU in
the configs) on the decoded predictions the assigner matched. State-dict keys equal mmdet's
(``cls_subnet.0.conv.weight``, ``bbox_subnet.3.bn.weight``, ``cls_score``, ``bbox_pred``,
``object_pred``).

Checkpoint units: ``level0``, the one level's whole forward."""
import torch
import torch.nn as nn

from ...core.anchor import anchor_inside_flags
from ...core.utils import reduce_mean, unmap
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..utils import ConvModule, bias_init_with_prob, constant_init, normal_init
from .anchor_head import AnchorHead
from .level_units import LevelUnitsMixin
from .paa_head import levels_to_images

__all__ = ['YOLOFHead']

INF = 1e8


@MODELS.register_module()
class YOLOFHead(LevelUnitsMixin, AnchorHead):
    """YOLOF head.

    Args:
        num_classes (int), in_channels (int): channels of the one input level (also the
            subnets' width).
        num_cls_convs (int), num_reg_convs (int): convs of the two subnets (2 and 4).
        norm_cfg (dict): the subnets' norm (default BN).
        with_cp (bool): ``'full'`` checkpointing of the level (not an mmdet 2.x argument).
        cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.
        **kwargs: :class:`AnchorHead` arguments (the anchor generator needs one stride).

    Under fp16 the score normalisation clamps its exponentials at the dtype's largest value
    (mmdet's 1e8 clamp fails in half precision). Initialised as mmdet's ``init_weights`` does
    (Normal(std=0.01) convs with zero bias, norms 1 / 0, ``cls_score`` bias at the 0.01 prior)
    whatever ``init_cfg`` says, except ``Pretrained``.
    """

    def __init__(self, num_classes, in_channels, num_cls_convs=2, num_reg_convs=4,
                 norm_cfg=dict(type='BN', requires_grad=True), with_cp=False,
                 cp_use_reentrant=False, **kwargs):
        for name, value in (('num_cls_convs', num_cls_convs), ('num_reg_convs', num_reg_convs)):
            if not (isinstance(value, int) and value >= 0):
                raise ValueError(f'{name} must be a non-negative int, got {value!r}')
        self.num_cls_convs = num_cls_convs
        self.num_reg_convs = num_reg_convs
        self.norm_cfg = norm_cfg
        super().__init__(num_classes, in_channels, **kwargs)
        if self.prior_generator.num_levels != 1:
            raise ValueError(f'YOLOFHead has one level: the anchor generator needs one stride, '
                             f'got {self.prior_generator.num_levels}')
        if not self.use_sigmoid_cls:
            raise ValueError('YOLOFHead needs a sigmoid classification (use_sigmoid=True)')
        self._init_weights()
        self._init_level_units(with_cp, cp_use_reentrant)

    def _init_layers(self):
        def subnet(n):
            return nn.Sequential(*[ConvModule(self.in_channels, self.in_channels, 3, padding=1,
                                              norm_cfg=self.norm_cfg) for _ in range(n)])

        self.cls_subnet = subnet(self.num_cls_convs)
        self.bbox_subnet = subnet(self.num_reg_convs)
        self.cls_score = nn.Conv2d(self.in_channels, self.num_base_priors * self.num_classes,
                                   3, stride=1, padding=1)
        self.bbox_pred = nn.Conv2d(self.in_channels, self.num_base_priors * 4, 3, stride=1,
                                   padding=1)
        self.object_pred = nn.Conv2d(self.in_channels, self.num_base_priors, 3, stride=1,
                                     padding=1)

    def _init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                normal_init(m, mean=0, std=0.01)
            if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.GroupNorm,
                              nn.modules.instancenorm._InstanceNorm, nn.LayerNorm)):
                constant_init(m, 1)
        nn.init.constant_(self.cls_score.bias, bias_init_with_prob(0.01))

    def forward_single(self, feature):
        cls_score = self.cls_score(self.cls_subnet(feature))
        n, _, h, w = cls_score.shape
        cls_score = cls_score.view(n, -1, self.num_classes, h, w)
        reg_feat = self.bbox_subnet(feature)
        bbox_reg = self.bbox_pred(reg_feat)
        objectness = self.object_pred(reg_feat).view(n, -1, 1, h, w)
        # mmdet clamps the exponentials at 1e8, which fp16 cannot hold (its clamp fails);
        # the largest finite value of the dtype below that keeps float32 results unchanged
        top = min(INF, torch.finfo(cls_score.dtype).max)
        normalized = cls_score + objectness - torch.log(
            1. + torch.clamp(cls_score.exp(), max=top) + torch.clamp(objectness.exp(), max=top))
        return normalized.view(n, -1, h, w), bbox_reg

    # ---------------------------------------------------------------- targets
    def get_targets(self, cls_scores_list, bbox_preds_list, anchor_list, valid_flag_list,
                    gt_bboxes_list, img_metas, gt_bboxes_ignore_list=None, gt_labels_list=None,
                    label_channels=1, unmap_outputs=True):
        """``(labels [B, A], label_weights [B, A], num_total_pos, num_total_neg,
        matched box weights [M], matched predicted boxes [M, 4], their gts [M, 4])``, the
        matches of all images concatenated."""
        num_imgs = len(img_metas)
        if not len(anchor_list) == len(valid_flag_list) == num_imgs:
            raise ValueError(f'anchors and valid flags need one entry per image ({num_imgs}), '
                             f'got {len(anchor_list)} and {len(valid_flag_list)}')
        ignores = gt_bboxes_ignore_list or [None] * num_imgs
        labels = gt_labels_list if gt_labels_list is not None else [None] * num_imgs
        results = [self._get_targets_single(
            bbox_preds_list[i], anchor_list[i], valid_flag_list[i], gt_bboxes_list[i],
            ignores[i], labels[i], img_metas[i], label_channels, unmap_outputs)
            for i in range(num_imgs)]
        lbl, lbl_w, pos_inds, neg_inds, _, weights, preds, targets = zip(*results)
        return (torch.stack(lbl, 0), torch.stack(lbl_w, 0),
                sum(max(i.numel(), 1) for i in pos_inds),
                sum(max(i.numel(), 1) for i in neg_inds),
                torch.cat(weights, 0), torch.cat(preds, 0), torch.cat(targets, 0))

    def _get_targets_single(self, bbox_preds, flat_anchors, valid_flags, gt_bboxes,
                            gt_bboxes_ignore, gt_labels, img_meta, label_channels=1,
                            unmap_outputs=True):
        inside = anchor_inside_flags(flat_anchors, valid_flags, img_meta['img_shape'][:2],
                                     cfg_get(self.train_cfg, 'allowed_border', -1))
        if not inside.any():
            raise ValueError(f'no anchor lies inside image {img_meta.get("filename", "")!r} '
                             f'(img_shape {img_meta["img_shape"]})')
        anchors = flat_anchors[inside, :]
        bbox_preds = bbox_preds.reshape(-1, 4)[inside, :]
        decoded = self.bbox_coder.decode(anchors, bbox_preds)
        assign_result = self.assigner.assign(decoded, anchors, gt_bboxes, gt_bboxes_ignore,
                                             None if self.sampling else gt_labels)
        sampling_result = self.sampler.sample(assign_result, anchors, gt_bboxes)
        num_valid = anchors.shape[0]
        labels = anchors.new_full((num_valid, ), self.num_classes, dtype=torch.long)
        label_weights = anchors.new_zeros(num_valid, dtype=torch.float)
        pos_inds, neg_inds = sampling_result.pos_inds, sampling_result.neg_inds
        if len(pos_inds) > 0:
            if gt_labels is None:
                labels[pos_inds] = 0
            else:
                labels[pos_inds] = gt_labels[sampling_result.pos_assigned_gt_inds].long()
            pos_weight = cfg_get(self.train_cfg, 'pos_weight', -1)
            label_weights[pos_inds] = 1.0 if pos_weight <= 0 else pos_weight
        if len(neg_inds) > 0:
            label_weights[neg_inds] = 1.0
        if unmap_outputs:
            total = flat_anchors.size(0)
            labels = unmap(labels, total, inside, fill=self.num_classes)
            label_weights = unmap(label_weights, total, inside)
        return (labels, label_weights, pos_inds, neg_inds, sampling_result,
                assign_result.pos_idx, assign_result.pos_predicted_boxes,
                assign_result.target_boxes)

    # ------------------------------------------------------------------ loss
    @force_fp32(apply_to=('cls_scores', 'bbox_preds'))
    def loss(self, cls_scores, bbox_preds, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """``dict(loss_cls, loss_bbox)``, both averaged over the positives of all processes
        (at least 1)."""
        if not self.train_cfg:
            raise ValueError(f'YOLOFHead.loss needs train_cfg, got {self.train_cfg!r}')
        if len(cls_scores) != 1:
            raise ValueError(f'YOLOFHead has one level, got {len(cls_scores)}')
        device = cls_scores[0].device
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        anchor_list, valid_flag_list = self.get_anchors(featmap_sizes, img_metas, device)
        anchor_list = [a[0] for a in anchor_list]
        valid_flag_list = [v[0] for v in valid_flag_list]
        label_channels = self.cls_out_channels if self.use_sigmoid_cls else 1
        (labels, label_weights, num_total_pos, num_total_neg, bbox_weights, pred_boxes,
         target_boxes) = self.get_targets(
            levels_to_images(cls_scores), levels_to_images(bbox_preds), anchor_list,
            valid_flag_list, gt_bboxes, img_metas, gt_bboxes_ignore_list=gt_bboxes_ignore,
            gt_labels_list=gt_labels, label_channels=label_channels)
        cls_score = cls_scores[0].permute(0, 2, 3, 1).reshape(-1, self.cls_out_channels)
        num_total_samples = num_total_pos + num_total_neg if self.sampling else num_total_pos
        num_total_samples = reduce_mean(
            cls_score.new_tensor(num_total_samples)).clamp_(1.0).item()
        loss_cls = self.loss_cls(cls_score, labels.reshape(-1), label_weights.reshape(-1),
                                 avg_factor=num_total_samples)
        if pred_boxes.shape[0] == 0:
            loss_bbox = pred_boxes.sum() * 0
        else:
            loss_bbox = self.loss_bbox(pred_boxes, target_boxes, bbox_weights.float(),
                                       avg_factor=num_total_samples)
        return dict(loss_cls=loss_cls, loss_bbox=loss_bbox)
