"""mmdet 2.x's ``DeformableDETRHead``: Deformable DETR over multi-level features (the neck's),
a class branch and a box branch per decoder layer (``cls_branches``, ``reg_branches``: one
shared module repeated unless ``with_box_refine``, mmdet's keys either way), boxes relative to
each layer's reference points. ``with_box_refine``: each decoder layer refines the reference
points with its own box branch (inside that layer's checkpoint unit). ``as_two_stage``: the
queries are the encoder's top proposals, scored by an extra branch pair (losses
``enc_loss_cls / enc_loss_bbox / enc_loss_iou``, class-agnostic).

Everything else (targets, losses, decoding, units, the more-gts-than-queries warning) is
:class:`DETRHead`'s.
"""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ..utils import bias_init_with_prob
from ..utils.transformer import inverse_sigmoid
from .detr_head import DETRHead

__all__ = ['DeformableDETRHead']


@MODELS.register_module()
class DeformableDETRHead(DETRHead):
    """Args: :class:`DETRHead`'s, plus ``with_box_refine`` and ``as_two_stage`` (mmdet's;
    ``as_two_stage`` is also set in the transformer config). ``in_channels`` is not used (the
    features come at the transformer's width from the neck), as in mmdet."""

    def __init__(self, *args, with_box_refine=False, as_two_stage=False, transformer=None,
                 **kwargs):
        self.with_box_refine = with_box_refine
        self.as_two_stage = as_two_stage
        if transformer is not None and as_two_stage:
            transformer = dict(transformer, as_two_stage=True)
        super().__init__(*args, transformer=transformer, **kwargs)

    def _init_layers(self):
        fc_cls = nn.Linear(self.embed_dims, self.cls_out_channels)
        reg = []
        for _ in range(self.num_reg_fcs):
            reg += [nn.Linear(self.embed_dims, self.embed_dims), nn.ReLU()]
        reg_branch = nn.Sequential(*reg, nn.Linear(self.embed_dims, 4))
        num_pred = self.transformer.decoder.num_layers + (1 if self.as_two_stage else 0)
        if self.with_box_refine:
            self.cls_branches = nn.ModuleList(copy.deepcopy(fc_cls) for _ in range(num_pred))
            self.reg_branches = nn.ModuleList(copy.deepcopy(reg_branch)
                                              for _ in range(num_pred))
        else:  # one module under every index (mmdet's layout: num_pred keys, one weight)
            self.cls_branches = nn.ModuleList([fc_cls] * num_pred)
            self.reg_branches = nn.ModuleList([reg_branch] * num_pred)
        if not self.as_two_stage:
            self.query_embedding = nn.Embedding(self.num_query, self.embed_dims * 2)

    def init_weights(self):
        """mmdet's: the transformer's init, class biases at prior 0.01 (sigmoid), the box
        branches' last layers zero with the first one's size bias -2 (0 when two-stage)."""
        self.transformer.init_weights()
        if self.loss_cls.use_sigmoid:
            for m in self.cls_branches:
                nn.init.constant_(m.bias, bias_init_with_prob(0.01))
        for m in self.reg_branches:
            nn.init.zeros_(m[-1].weight)
            nn.init.zeros_(m[-1].bias)
        nn.init.constant_(self.reg_branches[0][-1].bias.data[2:], -2.0)
        if self.as_two_stage:
            for m in self.reg_branches:
                nn.init.constant_(m[-1].bias.data[2:], 0.0)
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            super(DETRHead, self).init_weights()

    def forward(self, mlvl_feats, img_metas):
        """``(all_cls_scores [layers, bs, num_query, C], all_bbox_preds [layers, bs,
        num_query, 4], enc_cls_scores, enc_bbox_preds)``, the last two None unless
        ``as_two_stage``."""
        img_masks = self._image_masks(mlvl_feats[0], img_metas)
        masks, pos_embeds = [], []
        for feat in mlvl_feats:
            masks.append(F.interpolate(img_masks[None], size=feat.shape[-2:]).to(
                torch.bool).squeeze(0))
            pos_embeds.append(self.positional_encoding(masks[-1]))
        query_embeds = None if self.as_two_stage else self.query_embedding.weight
        hs, init_reference, inter_references, enc_cls, enc_coord = self.transformer(
            mlvl_feats, masks, query_embeds, pos_embeds,
            reg_branches=self.reg_branches if self.with_box_refine else None,
            cls_branches=self.cls_branches if self.as_two_stage else None)
        hs = hs.permute(0, 2, 1, 3)
        classes, coords = [], []
        for lvl in range(hs.shape[0]):
            reference = inverse_sigmoid(init_reference if lvl == 0 else
                                        inter_references[lvl - 1])
            tmp = self.reg_branches[lvl](hs[lvl])
            if reference.shape[-1] == 4:
                tmp = tmp + reference
            else:
                tmp = torch.cat([tmp[..., :2] + reference, tmp[..., 2:]], -1)
            classes.append(self.cls_branches[lvl](hs[lvl]))
            coords.append(tmp.sigmoid())
        if self.as_two_stage:
            return torch.stack(classes), torch.stack(coords), enc_cls, enc_coord.sigmoid()
        return torch.stack(classes), torch.stack(coords), None, None

    @force_fp32(apply_to=('all_cls_scores', 'all_bbox_preds'))
    def loss(self, all_cls_scores, all_bbox_preds, enc_cls_scores, enc_bbox_preds,
             gt_bboxes_list, gt_labels_list, img_metas, gt_bboxes_ignore=None):
        """:class:`DETRHead`'s decoder losses, plus (two-stage) the encoder proposals' losses
        against class-agnostic (all class 0) ground truths."""
        self._check_no_ignore(gt_bboxes_ignore, type(self).__name__)
        loss_dict = {}
        if enc_cls_scores is not None:
            binary_labels = [torch.zeros_like(labels) for labels in gt_labels_list]
            enc = self.loss_single(enc_cls_scores, enc_bbox_preds, gt_bboxes_list,
                                   binary_labels, img_metas)
            loss_dict.update(enc_loss_cls=enc[0], enc_loss_bbox=enc[1], enc_loss_iou=enc[2])
        loss_dict.update(self._decoder_losses(all_cls_scores, all_bbox_preds, gt_bboxes_list,
                                              gt_labels_list, img_metas))
        return loss_dict

    @force_fp32(apply_to=('all_cls_scores', 'all_bbox_preds'))
    def get_bboxes(self, all_cls_scores, all_bbox_preds, enc_cls_scores, enc_bbox_preds,
                   img_metas, rescale=False):
        """Per image ``(det_bboxes [k, 5], det_labels [k])`` from the last decoder layer."""
        return self._images_bboxes(all_cls_scores[-1], all_bbox_preds[-1], img_metas, rescale)
