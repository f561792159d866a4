"""mmdet 2.x ``CentripetalHead`` (Dong et al. 2020, CentripetalNet): CornerHead's pooling,
heatmap and offset branches (no embedding), plus per corner a guiding shift (towards the box
centre), a deformable conv whose offsets come from the (detached) guiding shift (``*_dcn_offset``,
``*_feat_adaption``) and a centripetal shift from the adapted feature. Corners pair when each
one's shifted centre falls in the other's central region. Keys as mmdet's.

Losses (lists over levels): ``det_loss``, ``off_loss``, ``guiding_loss`` (smooth L1, 0.05),
``centripetal_loss`` (smooth L1 of the log shifts). Checkpoint units: ``level{i}``.
"""
import torch.nn as nn

from ...ops.deform_conv import DeformConv2d
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ..utils import ConvModule, normal_init
from .corner_head import CornerHead

__all__ = ['CentripetalHead']


@MODELS.register_module()
class CentripetalHead(CornerHead):
    """Args: as :class:`CornerHead` (mmdet's configs set ``corner_emb_channels=0``,
    ``loss_embedding=None``), and ``centripetal_shift_channels`` / ``guiding_shift_channels``
    (must be 2), ``feat_adaption_conv_kernel`` (3), ``loss_guiding_shift``,
    ``loss_centripetal_shift``."""

    def __init__(self, *args, centripetal_shift_channels=2, guiding_shift_channels=2,
                 feat_adaption_conv_kernel=3,
                 loss_guiding_shift=dict(type='SmoothL1Loss', beta=1.0, loss_weight=0.05),
                 loss_centripetal_shift=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1),
                 init_cfg=None, **kwargs):
        if centripetal_shift_channels != 2 or guiding_shift_channels != 2:
            raise ValueError(f'CentripetalHead supports centripetal_shift_channels == '
                             f'guiding_shift_channels == 2, got {centripetal_shift_channels} '
                             f'and {guiding_shift_channels}')
        self.centripetal_shift_channels = centripetal_shift_channels
        self.guiding_shift_channels = guiding_shift_channels
        self.feat_adaption_conv_kernel = feat_adaption_conv_kernel
        super().__init__(*args, init_cfg=init_cfg, **kwargs)
        self.loss_guiding_shift = MODELS.build(loss_guiding_shift)
        self.loss_centripetal_shift = MODELS.build(loss_centripetal_shift)

    def _init_centripetal_layers(self):
        k, g = self.feat_adaption_conv_kernel, self.guiding_shift_channels
        for name in ('tl_feat_adaption', 'br_feat_adaption', 'tl_dcn_offset', 'br_dcn_offset',
                     'tl_guiding_shift', 'br_guiding_shift', 'tl_centripetal_shift',
                     'br_centripetal_shift'):
            setattr(self, name, nn.ModuleList())
        for _ in range(self.num_feat_levels):
            for corner in ('tl', 'br'):
                getattr(self, f'{corner}_feat_adaption').append(
                    DeformConv2d(self.in_channels, self.in_channels, k, 1, 1))
                getattr(self, f'{corner}_guiding_shift').append(
                    self._make_layers(g, self.in_channels))
                getattr(self, f'{corner}_dcn_offset').append(
                    ConvModule(g, k ** 2 * g, 1, bias=False, act_cfg=None))
                getattr(self, f'{corner}_centripetal_shift').append(
                    self._make_layers(self.centripetal_shift_channels, self.in_channels))

    def _init_layers(self):
        super()._init_layers()
        self._init_centripetal_layers()

    def _init_weights(self):
        """CornerHead's, then N(0, 0.01) adaption convs, N(0, 0.1) offset convs and PyTorch's
        default init of the shift branches (mmdet's)."""
        super()._init_weights()
        for i in range(self.num_feat_levels):
            for corner in ('tl', 'br'):
                normal_init(getattr(self, f'{corner}_feat_adaption')[i], std=0.01)
                normal_init(getattr(self, f'{corner}_dcn_offset')[i].conv, std=0.1)
                for name in ('guiding_shift', 'centripetal_shift'):
                    for m in getattr(self, f'{corner}_{name}')[i]:
                        m.conv.reset_parameters()

    def forward_single(self, x, lvl_ind):
        """``[tl_heat, br_heat, tl_off, br_off, tl_guiding_shift, br_guiding_shift,
        tl_centripetal_shift, br_centripetal_shift]``."""
        tl_heat, br_heat, _, _, tl_off, br_off, tl_pool, br_pool = super().forward_single(
            x, lvl_ind, return_pool=True)
        out = {}
        for corner, pool in (('tl', tl_pool), ('br', br_pool)):
            guiding = getattr(self, f'{corner}_guiding_shift')[lvl_ind](pool)
            offset = getattr(self, f'{corner}_dcn_offset')[lvl_ind](guiding.detach())
            adapted = getattr(self, f'{corner}_feat_adaption')[lvl_ind](pool, offset)
            out[corner] = (guiding, getattr(self, f'{corner}_centripetal_shift')[lvl_ind](
                adapted))
        return [tl_heat, br_heat, tl_off, br_off, out['tl'][0], out['br'][0], out['tl'][1],
                out['br'][1]]

    @force_fp32()
    def loss(self, tl_heats, br_heats, tl_offs, br_offs, tl_guiding_shifts, br_guiding_shifts,
             tl_centripetal_shifts, br_centripetal_shifts, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """``dict(det_loss, off_loss, guiding_loss, centripetal_loss)``, lists over levels."""
        targets = self.get_targets(gt_bboxes, gt_labels, tl_heats[-1].shape,
                                   img_metas[0]['pad_shape'],
                                   with_corner_emb=self.with_corner_emb,
                                   with_guiding_shift=True, with_centripetal_shift=True)
        det, off, guiding, centripetal = zip(*[
            self.loss_single(*outs, targets) for outs in
            zip(tl_heats, br_heats, tl_offs, br_offs, tl_guiding_shifts, br_guiding_shifts,
                tl_centripetal_shifts, br_centripetal_shifts)])
        return dict(det_loss=list(det), off_loss=list(off), guiding_loss=list(guiding),
                    centripetal_loss=list(centripetal))

    def loss_single(self, tl_hmp, br_hmp, tl_off, br_off, tl_guiding_shift, br_guiding_shift,
                    tl_centripetal_shift, br_centripetal_shift, targets):
        """One level: ``(det_loss, off_loss, guiding_loss, centripetal_loss)``."""
        det_loss, off_loss, tl_mask, br_mask = self._heat_and_offset_losses(
            tl_hmp, br_hmp, tl_off, br_off, targets)

        def pair(loss, tl_pred, br_pred, key):
            return (loss(tl_pred, targets[f'topleft_{key}'], tl_mask, avg_factor=tl_mask.sum())
                    + loss(br_pred, targets[f'bottomright_{key}'], br_mask,
                           avg_factor=br_mask.sum())) / 2.0

        guiding = pair(self.loss_guiding_shift, tl_guiding_shift, br_guiding_shift,
                       'guiding_shift')
        centripetal = pair(self.loss_centripetal_shift, tl_centripetal_shift,
                           br_centripetal_shift, 'centripetal_shift')
        return det_loss, off_loss, guiding, centripetal

    @force_fp32()
    def get_bboxes(self, tl_heats, br_heats, tl_offs, br_offs, tl_guiding_shifts,
                   br_guiding_shifts, tl_centripetal_shifts, br_centripetal_shifts, img_metas,
                   rescale=False, with_nms=True):
        """Per image ``(det_bboxes [k, 5], det_labels [k])`` from the last level."""
        if not tl_heats[-1].shape[0] == br_heats[-1].shape[0] == len(img_metas):
            raise ValueError(f'{len(img_metas)} img_metas for a batch of '
                             f'{tl_heats[-1].shape[0]}')
        return [self._get_bboxes_single(
            tl_heats[-1][i:i + 1], br_heats[-1][i:i + 1], tl_offs[-1][i:i + 1],
            br_offs[-1][i:i + 1], img_metas[i], tl_emb=None, br_emb=None,
            tl_centripetal_shift=tl_centripetal_shifts[-1][i:i + 1],
            br_centripetal_shift=br_centripetal_shifts[-1][i:i + 1], rescale=rescale,
            with_nms=with_nms) for i in range(len(img_metas))]
