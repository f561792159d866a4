"""mmdet 2.x ``SCNetBBoxHead``: a :class:`ConvFCBBoxHead` that can also return the feature its
cls and reg branches share (the feature SCNet relays to its mask branch)."""
from ....registry import MODELS
from .convfc_bbox_head import ConvFCBBoxHead

__all__ = ['SCNetBBoxHead']


@MODELS.register_module()
class SCNetBBoxHead(ConvFCBBoxHead):
    """Args as :class:`ConvFCBBoxHead` (mmdet's)."""

    def _forward_shared(self, x):
        for conv in self.shared_convs:
            x = conv(x)
        if self.num_shared_fcs > 0:
            if self.with_avg_pool:
                x = self.avg_pool(x)
            x = x.flatten(1)
            for fc in self.shared_fcs:
                x = self.relu(fc(x))
        return x

    def _forward_cls_reg(self, x):
        cls_score = self.fc_cls(self._branch(x, self.cls_convs, self.cls_fcs)) \
            if self.with_cls else None
        bbox_pred = self.fc_reg(self._branch(x, self.reg_convs, self.reg_fcs)) \
            if self.with_reg else None
        return cls_score, bbox_pred

    def forward(self, x, return_shared_feat=False):
        """``(cls_score, bbox_pred)``, plus the shared feature with ``return_shared_feat``."""
        x_shared = self._forward_shared(x)
        out = self._forward_cls_reg(x_shared)
        return out + (x_shared, ) if return_shared_feat else out
