"""mmdet 2.x ``SCNetMaskHead``: an :class:`FCNMaskHead` whose conv tower is, with
``conv_to_res``, a ``ResLayer`` of ``num_convs // 2`` ``SimplifiedBasicBlock`` s (SCNet's
residual mask branch; state-dict keys ``convs.{i}.conv1`` / ``conv2`` as mmdet)."""
from ....registry import MODELS
from ...utils import ResLayer, SimplifiedBasicBlock
from .fcn_mask_head import FCNMaskHead

__all__ = ['SCNetMaskHead']


@MODELS.register_module()
class SCNetMaskHead(FCNMaskHead):
    """Args: ``conv_to_res`` (bool, default True; needs ``conv_kernel_size=3``), then
    :class:`FCNMaskHead`'s."""

    def __init__(self, conv_to_res=True, **kwargs):
        super().__init__(**kwargs)
        self.conv_to_res = conv_to_res
        if conv_to_res:
            if self.conv_kernel_size != 3:
                raise ValueError(f'SCNetMaskHead conv_to_res needs conv_kernel_size=3, got '
                                 f'{self.conv_kernel_size!r}')
            self.num_res_blocks = self.num_convs // 2
            self.convs = ResLayer(SimplifiedBasicBlock, self.in_channels,
                                  self.conv_out_channels, self.num_res_blocks,
                                  conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg)
