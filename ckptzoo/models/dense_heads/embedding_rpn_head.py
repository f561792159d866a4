"""mmdet 2.x ``EmbeddingRPNHead``: Sparse R-CNN's learned proposals (Sun et al. 2021).

No feature map is read: ``init_proposal_bboxes`` (``[num_proposals, 4]``, normalised
``cx, cy, w, h``) are decoded to corner boxes scaled by each image's ``img_shape``, and
``init_proposal_features`` (``[num_proposals, C]``) are the object queries, the same for every
image of the batch. Both are trained through the RoI head (the boxes through the first stage's
box decoding). State-dict keys as mmdet's: ``init_proposal_bboxes.weight``,
``init_proposal_features.weight``.

Checkpoint units: none. The head computes nothing worth recomputing (its outputs are its own
weights, scaled or broadcast), so a unit would keep the same bytes and only add a call.
"""
import torch
import torch.nn as nn

from ...core.bbox.transforms import bbox_cxcywh_to_xyxy
from ...registry import MODELS
from ..checkpointing import CheckpointOwnerMixin

__all__ = ['EmbeddingRPNHead']


@MODELS.register_module()
class EmbeddingRPNHead(CheckpointOwnerMixin, nn.Module):
    """Args (mmdet 2.x's):
        num_proposals (int): the learned proposals per image (default 100).
        proposal_feature_channel (int): channels of each proposal feature (default 256).
        init_cfg: must be None (as mmdet: the boxes start as whole-image boxes).
        kwargs: ``train_cfg`` / ``test_cfg`` the detector passes (None in every mmdet config);
            accepted and unused, as mmdet.
    """

    def __init__(self, num_proposals=100, proposal_feature_channel=256, init_cfg=None,
                 **kwargs):
        super().__init__()
        if init_cfg is not None:
            raise ValueError(f'EmbeddingRPNHead takes no init_cfg (the proposals start as '
                             f'whole-image boxes, as mmdet), got {init_cfg!r}')
        unknown = sorted(set(kwargs) - {'train_cfg', 'test_cfg'})
        if unknown:
            raise TypeError(f'EmbeddingRPNHead got unexpected arguments {unknown}; it takes '
                            'num_proposals, proposal_feature_channel (and the detector\'s '
                            'train_cfg / test_cfg)')
        for name, value in (('num_proposals', num_proposals),
                            ('proposal_feature_channel', proposal_feature_channel)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f'EmbeddingRPNHead {name} must be a positive int, got '
                                 f'{value!r}')
        self.num_proposals = num_proposals
        self.proposal_feature_channel = proposal_feature_channel
        self.init_cfg = init_cfg
        self._init_layers()
        self._init_proposals()

    def _init_layers(self):
        self.init_proposal_bboxes = nn.Embedding(self.num_proposals, 4)
        self.init_proposal_features = nn.Embedding(self.num_proposals,
                                                   self.proposal_feature_channel)

    def _init_proposals(self):
        """Every proposal the whole image (``cx = cy = 0.5``, ``w = h = 1``); the features keep
        ``nn.Embedding``'s normal init (mmdet's ``init_weights``, here at construction)."""
        with torch.no_grad():
            self.init_proposal_bboxes.weight[:, :2] = 0.5
            self.init_proposal_bboxes.weight[:, 2:] = 1.

    def init_weights(self):
        """As mmdet's: the proposal boxes back to whole-image boxes."""
        self._init_proposals()

    def _decode_init_proposals(self, feats, img_metas):
        """``(proposals [B, N, 4], proposal_features [B, N, C], imgs_whwh [B, 1, 4])``:
        corner boxes in pixels of each image's ``img_shape``, the features expanded to the
        batch (a view, as mmdet), and each image's ``(w, h, w, h)``."""
        num_imgs = len(feats[0])
        if len(img_metas) != num_imgs:
            raise ValueError(f'EmbeddingRPNHead got {len(img_metas)} img_metas for a batch of '
                             f'{num_imgs}')
        proposals = bbox_cxcywh_to_xyxy(self.init_proposal_bboxes.weight.clone())
        imgs_whwh = torch.cat([feats[0].new_tensor([[meta['img_shape'][1],
                                                     meta['img_shape'][0]] * 2])
                               for meta in img_metas])[:, None, :]
        proposals = proposals * imgs_whwh
        features = self.init_proposal_features.weight.clone()
        features = features[None].expand(num_imgs, *features.size())
        return proposals, features, imgs_whwh

    def forward_dummy(self, img, img_metas):
        return self._decode_init_proposals(img, img_metas)

    def forward_train(self, img, img_metas):
        """``img``: the neck's features (only the batch size and dtype are read)."""
        return self._decode_init_proposals(img, img_metas)

    def simple_test_rpn(self, img, img_metas):
        return self._decode_init_proposals(img, img_metas)

    def simple_test(self, img, img_metas):
        raise NotImplementedError('EmbeddingRPNHead has no detections of its own; '
                                  'SparseRCNN runs simple_test_rpn')

    def aug_test_rpn(self, feats, img_metas):
        raise NotImplementedError('EmbeddingRPNHead does not support test-time augmentation')
