"""mmdet 2.x ``SCNetSemanticHead``: a :class:`FusedSemanticHead` whose conv tower is, with
``conv_to_res``, a ``ResLayer`` of ``num_convs // 2`` ``SimplifiedBasicBlock`` s (then
``num_convs`` counts the blocks, as mmdet)."""
from ....registry import MODELS
from ...utils import ResLayer, SimplifiedBasicBlock
from .fused_semantic_head import FusedSemanticHead

__all__ = ['SCNetSemanticHead']


@MODELS.register_module()
class SCNetSemanticHead(FusedSemanticHead):
    """Args: ``conv_to_res`` (bool, default True), then :class:`FusedSemanticHead`'s."""

    def __init__(self, conv_to_res=True, **kwargs):
        super().__init__(**kwargs)
        self.conv_to_res = conv_to_res
        if conv_to_res:
            num_res_blocks = self.num_convs // 2
            self.convs = ResLayer(SimplifiedBasicBlock, self.in_channels,
                                  self.conv_out_channels, num_res_blocks,
                                  conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg)
            self.num_convs = num_res_blocks
