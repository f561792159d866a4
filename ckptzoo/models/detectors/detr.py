"""mmdet 2.x's ``DETR`` and ``DeformableDETR``: :class:`SingleStageDetector` s whose head reads
the image metas in its forward (padding masks from ``img_shape`` within
``batch_input_shape``). DETR has no neck; Deformable DETR has one (a ChannelMapper)."""
import warnings

from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['DETR', 'DeformableDETR']


@MODELS.register_module()
class DETR(SingleStageDetector):
    """DETR (Carion et al. 2020); arguments as mmdet 2.x's ``DETR`` (no neck)."""

    def __init__(self, backbone, bbox_head, train_cfg=None, test_cfg=None, pretrained=None,
                 init_cfg=None):
        super().__init__(backbone, None, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)

    def forward_dummy(self, img):
        """The head's raw outputs for an unpadded batch (FLOP counting: mmdet warns that the
        attention's cost is not counted)."""
        warnings.warn('Warning! MultiheadAttention in DETR does not support flops computation! '
                      'Do not use the results in your papers!')
        h, w = img.shape[-2:]
        metas = [dict(batch_input_shape=(h, w), img_shape=(h, w, 3)) for _ in range(len(img))]
        return self.bbox_head(self.extract_feat(img), metas)

    def simple_test(self, img, img_metas, rescale=False):
        """As :class:`SingleStageDetector`, with ``batch_input_shape`` set here too (mmdet sets
        it only in ``forward_test``, so its ``simple_test`` called directly fails)."""
        self._set_batch_input_shape(img, img_metas)
        return super().simple_test(img, img_metas, rescale=rescale)


@MODELS.register_module()
class DeformableDETR(DETR):
    """Deformable DETR (Zhu et al. 2021); arguments as :class:`SingleStageDetector` (with a
    neck), as mmdet 2.x's ``DeformableDETR``."""

    def __init__(self, backbone, neck=None, bbox_head=None, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        SingleStageDetector.__init__(self, backbone, neck, bbox_head, train_cfg, test_cfg,
                                     pretrained, init_cfg)
