"""mmdet 2.x ``KnowledgeDistillationSingleStageDetector``: a one-stage student trained with a
frozen teacher detector's head outputs (the LD configs: a GFL teacher's box distributions as
the soft targets of an :class:`LDHead`).

As mmdet, the teacher is not a registered submodule: it is not in the state dict, not among
the parameters (nothing of it is trained or in the optimizer), not planned for checkpointing
(it runs under ``no_grad``), and kept in eval mode (``eval_teacher``). Differences, fixes:

* ``teacher_ckpt`` is read by ``init_weights`` (or, when that was not called, by the first
  ``forward_train``), not in the constructor: a config builds without the file (on the
  ``meta`` device too). A missing file, or a checkpoint that lacks tensors of the teacher or
  has other shapes, fails naming the file and the keys (mmdet warned and trained against a
  random teacher).
* The teacher's own ``init_cfg`` is never applied (as mmdet: its weights come from
  ``teacher_ckpt`` alone).
* ``.to()`` / ``.cuda()`` / ``.half()`` move the teacher too (mmdet's only ``.cuda()``);
  ``train()`` returns the model (mmdet's returned None); with ``eval_teacher`` the teacher
  is in eval mode from the start (mmdet's only after the first ``train()``: a step before it
  updated the teacher's BN statistics).
"""
import os
import os.path as osp

import torch
from mmengine.config import Config

from ...registry import MODELS
from ...runner.checkpoint import load_checkpoint
from ...utils.config_file import building_from, current_config_file
from .single_stage import SingleStageDetector

__all__ = ['KnowledgeDistillationSingleStageDetector', 'resolve_teacher_config']


def resolve_teacher_config(path, config_file=None):
    """The file a ``teacher_config`` path names. mmdet's configs give it relative to the
    repository root (``'configs/gfl/gfl_r101_fpn_mstrain_2x_coco.py'``), i.e. to the working
    directory of a run started there. Tried in order: the path as given (absolute, or relative
    to the working directory), then relative to each folder above the student's
    ``config_file`` (its folder's parent, ``configs/``'s parent, ...: the repository root, or
    ``mmdet/.mim`` of an installed mmdet), the nearest first."""
    path = os.fspath(path)
    if osp.isfile(path) or osp.isabs(path):
        if not osp.isfile(path):
            raise FileNotFoundError(f'teacher_config {path!r} not found: give the path of the '
                                    "teacher's config file (or its config as a dict)")
        return path
    tried = [osp.abspath(path)]
    if config_file:
        folder = osp.dirname(osp.abspath(config_file))
        while True:
            parent = osp.dirname(folder)
            if parent == folder:
                break
            folder = parent
            candidate = osp.join(folder, path)
            if osp.isfile(candidate):
                return candidate
            tried.append(candidate)
    where = (f'nor relative to the folders above the student config {config_file}'
             if config_file else '(the student config file is unknown: the model was not '
             'built from a file)')
    raise FileNotFoundError(
        f'teacher_config {path!r} not found relative to the working directory {os.getcwd()} '
        f'{where}; tried {", ".join(tried[:4])}{" ..." if len(tried) > 4 else ""}. Run from '
        f'the folder it is relative to (the repository root), or give an absolute path')


class TeacherMixin:
    """A teacher kept outside the module tree: ``teacher_model``, ``teacher_ckpt``,
    ``eval_teacher``; its weights read once by :meth:`load_teacher`."""

    def _init_teacher(self, teacher, teacher_ckpt, eval_teacher):
        self.eval_teacher = eval_teacher
        self.teacher_ckpt = teacher_ckpt
        self.teacher_loaded = teacher_ckpt is None
        self.teacher_model = teacher
        teacher.train(self.training and not eval_teacher)

    def __setattr__(self, name, value):
        if name == 'teacher_model':  # a plain attribute, not a submodule (as mmdet)
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def load_teacher(self):
        """Read ``teacher_ckpt`` into the teacher (once). Every tensor of the teacher must come
        from it with its shape (keys the teacher lacks are warned about)."""
        if self.teacher_loaded:
            return
        name = type(self).__name__
        try:
            load_checkpoint(self.teacher_model, self.teacher_ckpt, map_location='cpu',
                            complete=True)
        except FileNotFoundError as e:
            raise FileNotFoundError(
                f'{name} teacher_ckpt: {e}. The teacher\'s trained weights are needed to '
                'train the student: put the file there, or set model.teacher_ckpt to a local '
                'path (None trains against a randomly initialised teacher)') from e
        except RuntimeError as e:
            raise type(e)(f'{name} teacher_ckpt {self.teacher_ckpt} is not a checkpoint of the '
                          f'teacher: {e}') from e
        self.teacher_loaded = True

    def init_weights(self):
        """The student's ``init_cfg``, then the teacher's weights from ``teacher_ckpt``."""
        super().init_weights()
        self.load_teacher()

    def _apply(self, fn, *args, **kwargs):
        self.teacher_model._apply(fn, *args, **kwargs)
        return super()._apply(fn, *args, **kwargs)

    def train(self, mode=True):
        """The student in ``mode``; the teacher in eval mode with ``eval_teacher``."""
        self.teacher_model.train(False if self.eval_teacher else mode)
        return super().train(mode)


@MODELS.register_module()
class KnowledgeDistillationSingleStageDetector(TeacherMixin, SingleStageDetector):
    """Args (mmdet 2.x's): the student's ``backbone``, ``neck``, ``bbox_head`` (a head whose
    ``forward_train`` takes the teacher's head outputs, e.g. :class:`LDHead`);
    ``teacher_config`` (a config file path, see :func:`resolve_teacher_config`, or a config /
    dict with a ``model`` key: the teacher is ``model``); ``teacher_ckpt`` (a path, or a URL
    found in the local torch hub cache; None: no weights are loaded); ``eval_teacher``;
    ``train_cfg`` / ``test_cfg`` (the student's); ``pretrained`` (deprecated)."""

    def __init__(self, backbone, neck, bbox_head, teacher_config, teacher_ckpt=None,
                 eval_teacher=True, train_cfg=None, test_cfg=None, pretrained=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained)
        config_file = None
        if isinstance(teacher_config, (str, os.PathLike)):
            config_file = resolve_teacher_config(teacher_config, current_config_file())
            teacher_config = Config.fromfile(config_file, import_custom_modules=False)
        if not isinstance(teacher_config, (dict, Config)) or not isinstance(
                teacher_config.get('model'), dict):
            raise TypeError(f'{type(self).__name__} teacher_config must be a config file path '
                            f'or a config (a dict with a model dict), got '
                            f'{type(teacher_config).__name__}')
        with building_from(config_file or current_config_file()):
            teacher = MODELS.build(teacher_config['model'])
        for attr in ('extract_feat', 'bbox_head'):
            if not hasattr(teacher, attr):
                raise TypeError(f'{type(self).__name__} teacher must be a one-stage detector '
                                f'(extract_feat, bbox_head), got {type(teacher).__name__}')
        self._init_teacher(teacher, teacher_ckpt, eval_teacher)

    def forward_train(self, img, img_metas, gt_bboxes, gt_labels, gt_bboxes_ignore=None):
        """The student head's losses given the teacher head's outputs on the same images."""
        if len(img_metas) != img.size(0):
            raise ValueError(f'got {len(img_metas)} img_metas for a batch of {img.size(0)}')
        self.load_teacher()
        self._set_batch_input_shape(img, img_metas)
        x = self.extract_feat(img)
        with torch.no_grad():
            out_teacher = self.teacher_model.bbox_head(self.teacher_model.extract_feat(img))
        return self.bbox_head.forward_train(x, out_teacher, img_metas, gt_bboxes, gt_labels,
                                            gt_bboxes_ignore)

