"""mmdet 2.x ``BaseMaskHead``: the interface of the mask heads of one-stage instance
segmentors (SOLO, SOLOv2): ``forward_train`` runs ``forward`` then ``loss``; ``simple_test``
runs ``forward`` then ``get_results``, one result per image."""
import torch.nn as nn

from ...runner.checkpoint import load_checkpoint

__all__ = ['BaseMaskHead']


class BaseMaskHead(nn.Module):
    """Subclasses give ``forward(x)`` (a tuple), ``loss(*outs, gt_labels=, gt_masks=,
    img_metas=, gt_bboxes=, ...)`` and ``get_results(*outs, img_metas, rescale=, ...)``."""

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg; the other kinds were applied at construction."""
        init_cfg = getattr(self, 'init_cfg', None)
        if isinstance(init_cfg, dict) and init_cfg.get('type') == 'Pretrained':
            load_checkpoint(self, init_cfg['checkpoint'], map_location='cpu', strict=False,
                            prefix=init_cfg.get('prefix'))

    def loss(self, *args, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} implements no loss')

    def get_results(self, *args, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} implements no get_results')

    def forward_train(self, x, gt_labels, gt_masks, img_metas, gt_bboxes=None,
                      gt_bboxes_ignore=None, positive_infos=None, **kwargs):
        """The losses (dict). ``positive_infos`` (per image, from a bbox head that assigns
        the positives, as mmdet's CondInst / YOLACT) goes to ``forward`` when given."""
        outs = self(x) if positive_infos is None else self(x, positive_infos)
        if not isinstance(outs, tuple):
            raise TypeError(f'{type(self).__name__}.forward must return a tuple, got '
                            f'{type(outs).__name__}')
        return self.loss(*outs, gt_labels=gt_labels, gt_masks=gt_masks, img_metas=img_metas,
                         gt_bboxes=gt_bboxes, gt_bboxes_ignore=gt_bboxes_ignore,
                         positive_infos=positive_infos, **kwargs)

    def simple_test(self, feats, img_metas, rescale=False, instances_list=None, **kwargs):
        """Per image the results of ``get_results`` (``scores``, ``labels``, ``masks``)."""
        outs = self(feats) if instances_list is None else \
            self(feats, instances_list=instances_list)
        return self.get_results(*outs, img_metas, rescale=rescale,
                                instances_list=instances_list, **kwargs)
