"""mmdet 2.x ``DynamicMaskHead``: QueryInst's mask branch (Fang et al. 2021).

Each positive's RoI features (``[n, C, 14, 14]``) are first mixed by a ``DynamicConv`` whose
1x1 kernels its object query (the DII head's attention feature) generates, without the
projection (``with_proj=False``: the ``[n, 196, C]`` map is kept), then go through
:class:`FCNMaskHead`'s conv tower, upsampling and ``conv_logits``. The loss is the Dice loss of
each positive's class-channel probabilities against its target, averaged over the positives
of the (distributed) batch. State-dict keys: FCNMaskHead's plus
``instance_interactive_conv.*``.
"""
import torch
import torch.nn as nn

from ....core.utils import reduce_mean
from ....registry import MODELS
from ....runner.fp16 import auto_fp16, force_fp32
from .fcn_mask_head import FCNMaskHead

__all__ = ['DynamicMaskHead']


@MODELS.register_module()
class DynamicMaskHead(FCNMaskHead):
    """Args (mmdet 2.x's): :class:`FCNMaskHead`'s (``num_convs=4``, ``roi_feat_size=14``,
    ``in_channels=256``, ``conv_kernel_size=3``, ``conv_out_channels=256``,
    ``num_classes=80``, ``upsample_cfg``, ``conv_cfg``, ``norm_cfg``, ``predictor_cfg``),
    and:
        class_agnostic (bool): must be False (as mmdet).
        dynamic_conv_cfg (dict): the ``DynamicConv`` (``with_proj=False``,
            ``input_feat_shape`` the RoI size).
        loss_mask (dict): ``DiceLoss`` (weight 8) on probabilities.
    At construction the layers have mmdet's construction-time init (the convs ConvModule's,
    ``upsample`` / ``conv_logits`` / the DynamicConv PyTorch's defaults): in mmdet's QueryInst
    that is their init for good, since mmdet's ``init_weights`` never reaches the mask heads
    (see :meth:`SparseRoIHead.init_weights`). :meth:`init_weights`, called on the head itself,
    is mmdet's: Xavier-uniform weight matrices, ``conv_logits``'s bias 0.
    """

    def __init__(self, num_convs=4, roi_feat_size=14, in_channels=256, conv_kernel_size=3,
                 conv_out_channels=256, num_classes=80, class_agnostic=False,
                 upsample_cfg=dict(type='deconv', scale_factor=2), conv_cfg=None,
                 norm_cfg=None,
                 dynamic_conv_cfg=dict(type='DynamicConv', in_channels=256, feat_channels=64,
                                       out_channels=256, input_feat_shape=14, with_proj=False,
                                       act_cfg=dict(type='ReLU', inplace=True),
                                       norm_cfg=dict(type='LN')),
                 loss_mask=dict(type='DiceLoss', loss_weight=8.0), **kwargs):
        if class_agnostic is not False:
            raise ValueError(f'DynamicMaskHead only supports class_agnostic=False, got '
                             f'{class_agnostic!r}')
        super().__init__(num_convs=num_convs, roi_feat_size=roi_feat_size,
                         in_channels=in_channels, conv_kernel_size=conv_kernel_size,
                         conv_out_channels=conv_out_channels, num_classes=num_classes,
                         class_agnostic=class_agnostic, upsample_cfg=upsample_cfg,
                         conv_cfg=conv_cfg, norm_cfg=norm_cfg, loss_mask=loss_mask, **kwargs)
        self.instance_interactive_conv = MODELS.build(dynamic_conv_cfg)
        # FCNMaskHead gives these Kaiming weights at construction; mmdet's FCNMaskHead only in
        # its init_weights, which mmdet's QueryInst never calls: PyTorch's defaults, as there.
        for m in (self.upsample, self.conv_logits):
            if hasattr(m, 'reset_parameters'):
                m.reset_parameters()

    def init_weights(self):
        """mmdet's: every weight matrix Xavier-uniform, ``conv_logits``'s bias 0."""
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        nn.init.constant_(self.conv_logits.bias, 0.)

    @auto_fp16()
    def forward(self, roi_feat, proposal_feat):
        """``roi_feat [n, C, s, s]`` and ``proposal_feat [n, C]`` (or ``[B, N, C]``) ->
        mask logits ``[n, num_classes, 2s, 2s]``."""
        proposal_feat = proposal_feat.reshape(-1, self.in_channels)
        x = self.instance_interactive_conv(proposal_feat, roi_feat)
        x = x.permute(0, 2, 1).reshape(roi_feat.size())
        return self._mask_logits(x)

    @force_fp32(apply_to=('mask_pred', ))
    def loss(self, mask_pred, mask_targets, labels):
        """``dict(loss_mask=...)``: Dice of the positives' label-channel probabilities,
        averaged over the positives of the batch (at least 1); with none, ``mask_pred.sum()``."""
        if mask_pred.size(0) == 0:
            return dict(loss_mask=mask_pred.sum())
        num_pos = labels.new_ones(labels.size()).float().sum()
        avg_factor = torch.clamp(reduce_mean(num_pos), min=1.).item()
        probs = mask_pred[torch.arange(labels.numel(), device=labels.device), labels].sigmoid()
        return dict(loss_mask=self.loss_mask(probs, mask_targets, avg_factor=avg_factor))
