"""mmdet 2.x ``KnowledgeDistillationSingleStageDetector`` (LD): a one-stage student whose head
trains against the outputs of a frozen teacher detector, built from ``teacher_config`` (a
config dict or file with a ``model``) and loaded from ``teacher_ckpt``.

The teacher is kept outside the student's modules, as mmdet: not in its state dict,
parameters or checkpoint units. Here moving or casting the student (``to``, ``cuda``,
``double``) moves the teacher too (mmdet only followed ``cuda()``). The teacher checkpoint is
read at construction, as mmdet, but must hold every tensor of the teacher: a missing file or
a checkpoint of another model fails there, naming the file (mmdet loaded whatever matched and
warned). Built on the ``meta`` device (a config walk), nothing is read.

A relative ``teacher_config`` path (mmdet's configs write ``configs/gfl/...``, relative to
mmdet's repository) is looked up from the working directory, then in the installed mmdet's
``.mim`` tree."""
import importlib.util
import os.path as osp
from pathlib import Path

import torch

from ...registry import MODELS
from ...runner.checkpoint import load_checkpoint
from .single_stage import SingleStageDetector

__all__ = ['KnowledgeDistillationSingleStageDetector']


def _resolve_config(path):
    path = str(path)
    tried = [osp.abspath(path)]
    if osp.isfile(path):
        return path
    if not osp.isabs(path):
        spec = importlib.util.find_spec('mmdet')
        if spec is not None and spec.submodule_search_locations:
            candidate = osp.join(spec.submodule_search_locations[0], '.mim', path)
            tried.append(candidate)
            if osp.isfile(candidate):
                return candidate
    raise FileNotFoundError(f'teacher_config {path!r} not found (tried {", ".join(tried)})')


def _is_url(path):
    return isinstance(path, str) and '://' in path


@MODELS.register_module()
class KnowledgeDistillationSingleStageDetector(SingleStageDetector):
    """Args (mmdet's): ``backbone``, ``neck``, ``bbox_head`` (an LDHead), ``teacher_config``
    (dict with ``model``, or a config path), ``teacher_ckpt`` (path or URL; None: the
    teacher keeps its initialisation), ``eval_teacher`` (the teacher stays in eval mode),
    ``train_cfg``, ``test_cfg``, ``pretrained``; ``init_cfg`` (ours, as the other
    detectors)."""

    def __init__(self, backbone, neck, bbox_head, teacher_config, teacher_ckpt=None,
                 eval_teacher=True, train_cfg=None, test_cfg=None, pretrained=None,
                 init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)
        self.eval_teacher = eval_teacher
        if isinstance(teacher_config, (str, Path)):
            from mmengine.config import Config
            teacher_config = Config.fromfile(_resolve_config(teacher_config),
                                             import_custom_modules=False)
        if 'model' not in teacher_config:
            raise ValueError('teacher_config needs a model (a config dict or file with one)')
        model_cfg = teacher_config['model']
        model_cfg = model_cfg.to_dict() if hasattr(model_cfg, 'to_dict') else dict(model_cfg)
        teacher = MODELS.build(model_cfg)
        if not hasattr(teacher, 'extract_feat') or not hasattr(teacher, 'bbox_head'):
            raise TypeError(f'the teacher must be a one-stage detector (extract_feat and '
                            f'bbox_head), got {type(teacher).__name__}')
        object.__setattr__(self, 'teacher_model', teacher)  # outside the student's modules
        self.teacher_ckpt = teacher_ckpt
        if teacher_ckpt is not None:
            if not _is_url(teacher_ckpt) and not osp.isfile(str(teacher_ckpt)):
                raise FileNotFoundError(f'teacher_ckpt {str(teacher_ckpt)!r} does not exist')
            on_meta = any(p.is_meta for p in teacher.parameters())
            if not on_meta:
                load_checkpoint(teacher, str(teacher_ckpt), map_location='cpu', strict=False,
                                complete=True)

    def __setattr__(self, name, value):
        if name == 'teacher_model':
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def _apply(self, fn, *args, **kwargs):
        self.teacher_model._apply(fn, *args, **kwargs)
        return super()._apply(fn, *args, **kwargs)

    def train(self, mode=True):
        self.teacher_model.train(False if self.eval_teacher else mode)
        return super().train(mode)

    def forward_train(self, img, img_metas, gt_bboxes, gt_labels, gt_bboxes_ignore=None):
        """The student's losses against the ground truth and the teacher's head outputs (no
        gradient through the teacher)."""
        if len(img_metas) != img.size(0):
            raise ValueError(f'got {len(img_metas)} img_metas for a batch of {img.size(0)}')
        self._set_batch_input_shape(img, img_metas)
        x = self.extract_feat(img)
        with torch.no_grad():
            out_teacher = self.teacher_model.bbox_head(self.teacher_model.extract_feat(img))
        return self.bbox_head.forward_train(x, out_teacher, img_metas, gt_bboxes, gt_labels,
                                            gt_bboxes_ignore)
