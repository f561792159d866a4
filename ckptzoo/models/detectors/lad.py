"""mmdet 2.x ``LAD`` (label assignment distillation): a student :class:`SingleStageDetector`
trained on the anchors a frozen teacher (``teacher_backbone`` / ``teacher_neck`` /
``teacher_bbox_head``, a :class:`LADHead`) assigns with PAA on its own predictions.

As mmdet, a :class:`KnowledgeDistillationSingleStageDetector` whose teacher is given part by
part; the teacher is kept outside the state dict, the parameters and the checkpoint plan, and
its weights are read from ``teacher_ckpt`` by ``init_weights`` (or the first
``forward_train``), not while a config is built (see :mod:`.kd_one_stage` for the fixes)."""
import torch
import torch.nn as nn

from ...registry import MODELS
from ..utils import build_model_or_sequence
from .kd_one_stage import KnowledgeDistillationSingleStageDetector
from .single_stage import SingleStageDetector

__all__ = ['LAD']


@MODELS.register_module()
class LAD(KnowledgeDistillationSingleStageDetector):
    """Args (mmdet 2.x's): the student's ``backbone``, ``neck``, ``bbox_head``; the teacher's
    ``teacher_backbone``, ``teacher_neck`` (None for none), ``teacher_bbox_head``;
    ``teacher_ckpt`` (a path, or a URL found in the local cache; None: random teacher);
    ``eval_teacher`` (keep the teacher in eval mode); ``train_cfg`` / ``test_cfg`` (the
    teacher's head gets them too); ``pretrained`` (deprecated: the student backbone's)."""

    def __init__(self, backbone, neck, bbox_head, teacher_backbone, teacher_neck,
                 teacher_bbox_head, teacher_ckpt, eval_teacher=True, train_cfg=None,
                 test_cfg=None, pretrained=None):
        SingleStageDetector.__init__(self, backbone, neck, bbox_head, train_cfg, test_cfg,
                                     pretrained)
        teacher = nn.Module()
        teacher.backbone = MODELS.build(teacher_backbone)
        if teacher_neck is not None:
            teacher.neck = build_model_or_sequence(teacher_neck, MODELS)
        teacher.bbox_head = MODELS.build(dict(teacher_bbox_head, train_cfg=train_cfg,
                                              test_cfg=test_cfg))
        if not hasattr(teacher.bbox_head, 'get_label_assignment'):
            raise TypeError(f'LAD teacher_bbox_head must assign labels (LADHead), got '
                            f'{type(teacher.bbox_head).__name__}')
        self._init_teacher(teacher, teacher_ckpt, eval_teacher)

    @property
    def with_teacher_neck(self):
        return getattr(self.teacher_model, 'neck', None) is not None

    def extract_teacher_feat(self, img):
        x = self.teacher_model.backbone(img)
        return self.teacher_model.neck(x) if self.with_teacher_neck else x

    def forward_train(self, img, img_metas, gt_bboxes, gt_labels, gt_bboxes_ignore=None):
        """The student's losses on the teacher's label assignment."""
        if len(img_metas) != img.size(0):
            raise ValueError(f'got {len(img_metas)} img_metas for a batch of {img.size(0)}')
        self.load_teacher()
        self._set_batch_input_shape(img, img_metas)
        with torch.no_grad():
            outs_teacher = self.teacher_model.bbox_head(self.extract_teacher_feat(img))
            assignment = self.teacher_model.bbox_head.get_label_assignment(
                *outs_teacher, gt_bboxes, gt_labels, img_metas, gt_bboxes_ignore)
        x = self.extract_feat(img)
        return self.bbox_head.forward_train(x, assignment, img_metas, gt_bboxes, gt_labels,
                                            gt_bboxes_ignore)
