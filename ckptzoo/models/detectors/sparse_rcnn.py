"""mmdet 2.x ``SparseRCNN`` (Sun et al. 2021): backbone -> neck -> ``EmbeddingRPNHead`` (learned
proposal boxes and features) -> ``SparseRoIHead`` (iterative DII heads, one-to-one matched
losses, no NMS). Keys ``backbone.*``, ``neck.*``, ``rpn_head.*``, ``roi_head.*`` as mmdet."""
from ...registry import MODELS
from .two_stage import TwoStageDetector

__all__ = ['SparseRCNN']


@MODELS.register_module()
class SparseRCNN(TwoStageDetector):
    """Args as mmdet 2.x's :class:`TwoStageDetector`; ``rpn_head`` is required (the proposals
    are learned, never given) and ``train_cfg.rpn`` / ``test_cfg.rpn`` are None in mmdet's
    configs."""

    TEST_INPUTS = ()
    RPN_NEEDS_TEST_CFG = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.with_rpn:
            raise ValueError(f'{type(self).__name__} needs an rpn_head (EmbeddingRPNHead): '
                             'Sparse R-CNN and QueryInst do not support external proposals')

    def forward_train(self, img, img_metas, gt_bboxes, gt_labels, gt_bboxes_ignore=None,
                      gt_masks=None, proposals=None, **kwargs):
        """The RoI head's losses of every stage (``stage{i}_loss_cls`` ...); ``gt_masks`` for
        QueryInst. ``kwargs`` (other annotations the pipeline collects) are unused."""
        if proposals is not None:
            raise ValueError('Sparse R-CNN and QueryInst do not support external proposals')
        self._need_roi_head('train')
        if len(img_metas) != img.size(0):
            raise ValueError(f'got {len(img_metas)} img_metas for a batch of {img.size(0)}')
        self._set_batch_input_shape(img, img_metas)
        x = self.extract_feat(img)
        proposal_boxes, proposal_features, imgs_whwh = self.rpn_head.forward_train(x, img_metas)
        return self.roi_head.forward_train(x, proposal_boxes, proposal_features, img_metas,
                                           gt_bboxes, gt_labels,
                                           gt_bboxes_ignore=gt_bboxes_ignore,
                                           gt_masks=gt_masks, imgs_whwh=imgs_whwh)

    def simple_test(self, img, img_metas, rescale=False):
        """Per image the per-class ``[k, 5]`` arrays (or ``(bbox_results, segm_results)``)."""
        x = self.extract_feat(img)
        proposal_boxes, proposal_features, imgs_whwh = self.rpn_head.simple_test_rpn(
            x, img_metas)
        return self.roi_head.simple_test(x, proposal_boxes, proposal_features, img_metas,
                                         imgs_whwh=imgs_whwh, rescale=rescale)

    def aug_test(self, imgs, img_metas, rescale=False):
        """Refused with mmdet's error (its EmbeddingRPNHead's), before any forward."""
        raise NotImplementedError('EmbeddingRPNHead does not support test-time augmentation '
                                  '(Sparse R-CNN and QueryInst have none, as mmdet)')

    def forward_dummy(self, img):
        """Every stage's raw outputs for images of mmdet's dummy shape (FLOP counting)."""
        x = self.extract_feat(img)
        metas = [dict(img_shape=(800, 1333, 3)) for _ in range(len(img))]
        proposal_boxes, proposal_features, _ = self.rpn_head.simple_test_rpn(x, metas)
        return self.roi_head.forward_dummy(x, proposal_boxes, proposal_features, metas)
