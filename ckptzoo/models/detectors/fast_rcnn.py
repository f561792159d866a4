"""mmdet 2.x ``FastRCNN`` (Girshick 2015): a :class:`TwoStageDetector` without an RPN; the
proposals come with the data (the dataset's ``proposal_file``, ``LoadProposals``, ``Collect``
of ``'proposals'``) and reach ``forward_train(..., proposals=)`` and ``simple_test``."""
from ...registry import MODELS
from .two_stage import TwoStageDetector

__all__ = ['FastRCNN']


@MODELS.register_module()
class FastRCNN(TwoStageDetector):
    """Args as mmdet 2.x (``roi_head``, ``train_cfg`` and ``test_cfg`` are required, in that
    order after ``backbone``; there is no ``rpn_head``)."""

    def __init__(self, backbone, roi_head, train_cfg, test_cfg, neck=None, pretrained=None,
                 init_cfg=None):
        super().__init__(backbone=backbone, neck=neck, roi_head=roi_head, train_cfg=train_cfg,
                         test_cfg=test_cfg, pretrained=pretrained, init_cfg=init_cfg)

    def forward_test(self, img, img_metas, proposals=None, **kwargs):
        """As mmdet: ``proposals`` per augmentation (a list of per-image lists), or per
        image with a single batch; one augmentation only (mmdet has no test-time
        augmentation for Fast R-CNN)."""
        if proposals is None:
            raise ValueError('FastRCNN needs the proposals to test (LoadProposals, and '
                             "Collect keys=['img', 'proposals'])")
        if isinstance(img, (list, tuple)) and len(img) > 1:
            raise NotImplementedError(f'FastRCNN has no test-time augmentation, got '
                                      f'{len(img)} augmentations')
        return super().forward_test(img, img_metas, proposals=proposals, **kwargs)
