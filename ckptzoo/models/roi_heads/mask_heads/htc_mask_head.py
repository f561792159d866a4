"""mmdet 2.x ``HTCMaskHead`` (Hybrid Task Cascade, Chen et al. 2019): an :class:`FCNMaskHead`
that also takes the previous stage's mask feature (the *mask information flow*), adds it
through a 1x1 ``conv_res`` ConvModule, and can return its own last conv feature for the next
stage. State-dict keys are mmdet's (``conv_res.conv.weight`` besides the FCN head's)."""
from ....registry import MODELS
from ...utils import ConvModule
from .fcn_mask_head import FCNMaskHead

__all__ = ['HTCMaskHead']


@MODELS.register_module()
class HTCMaskHead(FCNMaskHead):
    """Args: ``with_conv_res`` (bool, default True: a ``conv_res`` for the previous stage's
    feature; the first stage of mmdet's configs has none), then :class:`FCNMaskHead`'s."""

    def __init__(self, with_conv_res=True, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.with_conv_res = with_conv_res
        if with_conv_res:
            self.conv_res = ConvModule(self.conv_out_channels, self.conv_out_channels, 1,
                                       conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg)

    def forward(self, x, res_feat=None, return_logits=True, return_feat=True):
        """RoI features (and the previous stage's feature ``res_feat``) -> the mask logits
        and / or this stage's last conv feature: ``[logits, feat]`` when both are asked for
        (mmdet's list), else the one asked for."""
        if not (return_logits or return_feat):
            raise ValueError('HTCMaskHead.forward needs return_logits or return_feat')
        if res_feat is not None:
            if not self.with_conv_res:
                raise ValueError('HTCMaskHead with_conv_res=False takes no res_feat (the '
                                 "previous stage's mask feature); set with_conv_res=True")
            x = x + self.conv_res(res_feat)
        for conv in self.convs:
            x = conv(x)
        res_feat = x
        outs = []
        if return_logits:
            if self.upsample is not None:
                x = self.upsample(x)
                if self.upsample_method == 'deconv':
                    x = self.relu(x)
            outs.append(self.conv_logits(x))
        if return_feat:
            outs.append(res_feat)
        return outs if len(outs) > 1 else outs[0]
