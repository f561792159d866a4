"""mmdet 2.x ``CascadeRPNHead`` (Vu et al. 2019): RPN stages that each refine the previous
stage's anchors, with convs adapted to those anchors (``AdaptiveConv``).

State-dict keys equal mmdet's (``stages.0.rpn_conv.conv.weight``, ``stages.1.rpn_cls.bias``,
...). Checkpoint units: each level of each stage (``rpn_head.stages.0.level0``, ...), as
:class:`RPNHead`; the anchors and deformable offsets are made from detached outputs, so they
keep nothing for backward.
"""
import copy

import torch
import torch.nn as nn

from ...core.anchor import images_to_levels
from ...core.bbox import RegionAssigner
from ...ops import DeformConv2d
from ...registry import MODELS, TASK_UTILS
from ...utils.cfg_get import cfg_get
from ..checkpointing import CheckpointOwnerMixin, unit_step
from ..utils import apply_init_cfg
from .rpn_head import RPNHead

__all__ = ['AdaptiveConv', 'StageCascadeRPNHead', 'CascadeRPNHead']


class AdaptiveConv(nn.Module):
    """A 3x3 conv whose samples follow the anchors: ``type='dilation'`` a plain dilated conv
    (uniform anchors; ``offset`` must be None), ``type='offset'`` a deformable conv driven by
    offsets from the anchors (arbitrary anchors; ``offset`` ``[N, H*W, 18]``). mmdet's
    arguments; the dilated conv has a bias (mmdet passes none to ``nn.Conv2d``), the
    deformable one none."""

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, padding=1,
                 dilation=3, groups=1, bias=False, type='dilation',
                 init_cfg=dict(type='Normal', std=0.01, override=dict(name='conv'))):
        super().__init__()
        if type not in ('offset', 'dilation'):
            raise ValueError(f"AdaptiveConv type must be 'offset' or 'dilation', got {type!r}")
        if kernel_size != 3:
            raise ValueError(f'AdaptiveConv only supports kernel_size 3, got {kernel_size!r}')
        self.adapt_type = type
        if type == 'offset':
            if not (stride == 1 and padding == 1 and groups == 1):
                raise ValueError(f"AdaptiveConv type='offset' only supports stride 1, padding 1 "
                                 f'and groups 1, got {stride}, {padding}, {groups}')
            self.conv = DeformConv2d(in_channels, out_channels, kernel_size, padding=padding,
                                     stride=stride, groups=groups, bias=bias)
        else:
            self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=dilation,
                                  dilation=dilation)
        self.init_cfg = init_cfg
        apply_init_cfg(self, init_cfg)

    def forward(self, x, offset):
        if self.adapt_type == 'dilation':
            if offset is not None:
                raise ValueError("AdaptiveConv type='dilation' takes no offset")
            return self.conv(x)
        n, _, h, w = x.shape
        if offset is None or offset.shape[1] != h * w:
            raise ValueError(f"AdaptiveConv type='offset' needs an offset [N, {h * w}, 18] "
                             f'for a {h}x{w} map, got '
                             f'{None if offset is None else tuple(offset.shape)}')
        offset = offset.permute(0, 2, 1).reshape(n, -1, h, w).contiguous()
        return self.conv(x, offset)


@MODELS.register_module()
class StageCascadeRPNHead(RPNHead):
    """One stage of :class:`CascadeRPNHead`, mmdet 2.x arguments.

    Args:
        in_channels (int): channels of each input level.
        anchor_generator (dict): one anchor per location (scales [8], ratios [1.0]).
        adapt_cfg (dict): :class:`AdaptiveConv` arguments (``type`` 'dilation' / 'offset').
        bridged_feature (bool): pass this stage's conv features to the next stage instead of
            its input.
        with_cls (bool): a ``rpn_cls`` branch (and ``loss_rpn_cls``).
        sampling (bool): sample anchors with ``train_cfg.sampler`` (losses averaged over the
            samples); False: ``PseudoSampler``, losses averaged over all anchors / 200.
        init_cfg (dict): default Normal(std=0.01) on ``rpn_reg`` (and ``rpn_cls``).
        **kwargs: :class:`RPNHead` arguments.
    """

    def __init__(self, in_channels,
                 anchor_generator=dict(type='AnchorGenerator', scales=[8], ratios=[1.0],
                                       strides=[4, 8, 16, 32, 64]),
                 adapt_cfg=dict(type='dilation', dilation=3), bridged_feature=False,
                 with_cls=True, sampling=True, init_cfg=None, **kwargs):
        self.with_cls = with_cls
        self.anchor_strides = anchor_generator['strides']
        self.anchor_scales = anchor_generator['scales']
        self.bridged_feature = bridged_feature
        self.adapt_cfg = dict(adapt_cfg)
        if init_cfg is None:
            init_cfg = dict(type='Normal', std=0.01, override=[dict(name='rpn_reg')])
            if with_cls:
                init_cfg['override'].append(dict(name='rpn_cls'))
        super().__init__(in_channels, anchor_generator=anchor_generator, init_cfg=init_cfg,
                         **kwargs)
        self.sampling = sampling
        if self.train_cfg:
            sampler = cfg_get(self.train_cfg, 'sampler') if sampling else None
            self.sampler = TASK_UTILS.build(sampler or dict(type='PseudoSampler'))

    def _init_layers(self):
        self.rpn_conv = AdaptiveConv(self.in_channels, self.feat_channels, **self.adapt_cfg)
        if self.with_cls:
            self.rpn_cls = nn.Conv2d(self.feat_channels,
                                     self.num_base_priors * self.cls_out_channels, 1)
        self.rpn_reg = nn.Conv2d(self.feat_channels, self.num_base_priors * 4, 1)
        self.relu = nn.ReLU(inplace=True)

    def _forward_level(self, x, offset=None):
        """A level's unit: what it makes (its features only when bridged: an input is not
        returned through a checkpoint)."""
        feat = self.relu(self.rpn_conv(x, offset))
        cls_score = self.rpn_cls(feat) if self.with_cls else None
        return (feat if self.bridged_feature else None), cls_score, self.rpn_reg(feat)

    def forward_single(self, x, offset=None):
        """``(bridged_x, cls_score or None, bbox_pred)`` of one level, as mmdet."""
        feat, cls_score, bbox_pred = self._forward_level(x, offset)
        return (x if feat is None else feat), cls_score, bbox_pred

    def _checkpoint_steps(self):
        return [[unit_step(f'level{i}', unit, self._forward_level, self)]
                for i, unit in enumerate(self.level_units)]

    def forward(self, feats, offset_list=None):
        """``(bridged feats, cls_scores, bbox_preds)``, lists over levels, each level through
        its unit."""
        if len(feats) != len(self.level_units):
            raise ValueError(f'{type(self).__name__} expects {len(self.level_units)} levels, '
                             f'got {len(feats)}')
        offset_list = offset_list if offset_list is not None else [None] * len(feats)
        outs = [unit(self._forward_level, x, off)
                for unit, x, off in zip(self.level_units, feats, offset_list)]
        return ([x if o[0] is None else o[0] for x, o in zip(feats, outs)],
                [o[1] for o in outs], [o[2] for o in outs])

    # ---------------------------------------------------------------- targets
    def _region_targets_single(self, anchors, valid_flags, gt_bboxes, gt_bboxes_ignore,
                               gt_labels, img_meta, featmap_sizes, label_channels=1):
        assign_result = self.assigner.assign(
            anchors, valid_flags, gt_bboxes, img_meta, featmap_sizes, self.anchor_scales[0],
            self.anchor_strides, gt_bboxes_ignore=gt_bboxes_ignore, gt_labels=None,
            allowed_border=cfg_get(self.train_cfg, 'allowed_border'))
        flat_anchors = torch.cat(anchors)
        sampling_result = self.sampler.sample(assign_result, flat_anchors, gt_bboxes)
        num = flat_anchors.shape[0]
        bbox_targets = torch.zeros_like(flat_anchors)
        bbox_weights = torch.zeros_like(flat_anchors)
        labels = flat_anchors.new_zeros(num, dtype=torch.long)
        label_weights = flat_anchors.new_zeros(num, dtype=torch.float)
        pos_inds, neg_inds = sampling_result.pos_inds, sampling_result.neg_inds
        if len(pos_inds) > 0:
            bbox_targets[pos_inds, :] = sampling_result.pos_gt_bboxes if self.reg_decoded_bbox \
                else self.bbox_coder.encode(sampling_result.pos_bboxes,
                                            sampling_result.pos_gt_bboxes)
            bbox_weights[pos_inds, :] = 1.0
            # mmdet labels positives 1 here (0 in RPNHead): kept as is
            labels[pos_inds] = 1 if gt_labels is None else \
                gt_labels[sampling_result.pos_assigned_gt_inds]
            pos_weight = cfg_get(self.train_cfg, 'pos_weight', -1)
            label_weights[pos_inds] = 1.0 if pos_weight <= 0 else pos_weight
        if len(neg_inds) > 0:
            label_weights[neg_inds] = 1.0
        return labels, label_weights, bbox_targets, bbox_weights, pos_inds, neg_inds

    def region_targets(self, anchor_list, valid_flag_list, gt_bboxes_list, img_metas,
                       featmap_sizes, gt_bboxes_ignore_list=None, gt_labels_list=None,
                       label_channels=1, unmap_outputs=True):
        """:meth:`get_targets` with a :class:`RegionAssigner`: over all anchors (no inside
        filter; the assigner ignores those outside)."""
        num_imgs = len(img_metas)
        if not len(anchor_list) == len(valid_flag_list) == num_imgs:
            raise ValueError('anchors and valid flags need one entry per image')
        num_level_anchors = [a.size(0) for a in anchor_list[0]]
        gt_bboxes_ignore_list = gt_bboxes_ignore_list or [None] * num_imgs
        gt_labels_list = gt_labels_list or [None] * num_imgs
        results = [self._region_targets_single(
            anchor_list[i], valid_flag_list[i], gt_bboxes_list[i], gt_bboxes_ignore_list[i],
            gt_labels_list[i], img_metas[i], featmap_sizes, label_channels)
            for i in range(num_imgs)]
        labels, label_weights, bbox_targets, bbox_weights, pos_inds, neg_inds = zip(*results)
        num_total_pos = sum(max(inds.numel(), 1) for inds in pos_inds)
        num_total_neg = sum(max(inds.numel(), 1) for inds in neg_inds)
        return (images_to_levels(labels, num_level_anchors),
                images_to_levels(label_weights, num_level_anchors),
                images_to_levels(bbox_targets, num_level_anchors),
                images_to_levels(bbox_weights, num_level_anchors), num_total_pos, num_total_neg)

    def get_targets(self, anchor_list, valid_flag_list, gt_bboxes, img_metas, featmap_sizes,
                    gt_bboxes_ignore=None, label_channels=1):
        """Targets per level: by region (:class:`RegionAssigner`) or as :class:`AnchorHead`."""
        if isinstance(self.assigner, RegionAssigner):
            return self.region_targets(anchor_list, valid_flag_list, gt_bboxes, img_metas,
                                       featmap_sizes, gt_bboxes_ignore_list=gt_bboxes_ignore,
                                       label_channels=label_channels)
        return super().get_targets(anchor_list, valid_flag_list, gt_bboxes, img_metas,
                                   gt_bboxes_ignore_list=gt_bboxes_ignore,
                                   label_channels=label_channels)

    def anchor_offset(self, anchor_list, anchor_strides, featmap_sizes):
        """Per level ``[N, H*W, 18]`` offsets of the deformable 3x3 kernel that make it sample
        each anchor's box: the anchor centre's shift from the location plus the kernel's
        stretch to the anchor's size, ``(y, x)`` per kernel point."""
        dtype, device = anchor_list[0][0].dtype, anchor_list[0][0].device
        idx = torch.arange(-1, 2, dtype=dtype, device=device)
        ky, kx = torch.meshgrid(idx, idx, indexing='ij')
        kx, ky = kx.reshape(-1), ky.reshape(-1)
        per_image = []
        for anchors_of_image in anchor_list:
            mlvl = []
            for anchors, stride, (h, w) in zip(anchors_of_image, anchor_strides, featmap_sizes):
                if len(anchors) != h * w:
                    raise ValueError(f'{len(anchors)} anchors for a {h}x{w} feature map')
                cx = (anchors[:, 0] + anchors[:, 2]) * 0.5 / stride
                cy = (anchors[:, 1] + anchors[:, 3]) * 0.5 / stride
                gy, gx = torch.meshgrid(torch.arange(0, h, device=device),
                                        torch.arange(0, w, device=device), indexing='ij')
                cx = cx - gx.reshape(-1).type_as(cx)
                cy = cy - gy.reshape(-1).type_as(cy)
                sw = (anchors[:, 2] - anchors[:, 0]) / stride / 2 - 1
                sh = (anchors[:, 3] - anchors[:, 1]) / stride / 2 - 1
                off_x = sw[:, None] * kx + cx[:, None]
                off_y = sh[:, None] * ky + cy[:, None]
                mlvl.append(torch.stack([off_y, off_x], dim=-1).reshape(len(anchors), -1))
            per_image.append(torch.cat(mlvl))
        return images_to_levels(per_image, [a.size(0) for a in anchor_list[0]])

    # ------------------------------------------------------------------ loss
    def loss_single(self, cls_score, bbox_pred, anchors, labels, label_weights, bbox_targets,
                    bbox_weights, num_total_samples):
        loss_cls = None
        if self.with_cls:
            cls_score = cls_score.permute(0, 2, 3, 1).reshape(-1, self.cls_out_channels)
            loss_cls = self.loss_cls(cls_score, labels.reshape(-1), label_weights.reshape(-1),
                                     avg_factor=num_total_samples)
        bbox_pred = bbox_pred.permute(0, 2, 3, 1).reshape(-1, 4)
        if self.reg_decoded_bbox:
            bbox_pred = self.bbox_coder.decode(anchors.reshape(-1, 4), bbox_pred)
        loss_reg = self.loss_bbox(bbox_pred, bbox_targets.reshape(-1, 4),
                                  bbox_weights.reshape(-1, 4), avg_factor=num_total_samples)
        return loss_cls, loss_reg

    def loss(self, anchor_list, valid_flag_list, cls_scores, bbox_preds, gt_bboxes, img_metas,
             gt_bboxes_ignore=None):
        """``dict(loss_rpn_cls=[per level], loss_rpn_reg=[per level])`` (no ``loss_rpn_cls``
        without ``with_cls``), on this stage's anchors ``anchor_list``."""
        if not self.train_cfg:
            raise ValueError(f'{type(self).__name__}.loss needs train_cfg, got '
                             f'{self.train_cfg!r}')
        featmap_sizes = [b.size()[-2:] for b in bbox_preds]
        label_channels = self.cls_out_channels if self.use_sigmoid_cls else 1
        (labels_list, label_weights_list, bbox_targets_list, bbox_weights_list, num_total_pos,
         num_total_neg) = self.get_targets(anchor_list, valid_flag_list, gt_bboxes, img_metas,
                                           featmap_sizes, gt_bboxes_ignore=gt_bboxes_ignore,
                                           label_channels=label_channels)
        if self.sampling:
            num_total_samples = num_total_pos + num_total_neg
        else:  # mmdet's fixed factor (from Guided Anchoring)
            num_total_samples = sum(labels.numel() for labels in labels_list) / 200.0
        mlvl_anchors = [torch.cat(anchors, dim=0) for anchors in zip(*anchor_list)]
        losses_cls, losses_reg = [], []
        for args in zip(cls_scores, bbox_preds, mlvl_anchors, labels_list, label_weights_list,
                        bbox_targets_list, bbox_weights_list):
            loss_cls, loss_reg = self.loss_single(*args, num_total_samples=num_total_samples)
            losses_cls.append(loss_cls)
            losses_reg.append(loss_reg)
        if self.with_cls:
            return dict(loss_rpn_cls=losses_cls, loss_rpn_reg=losses_reg)
        return dict(loss_rpn_reg=losses_reg)

    # ------------------------------------------------------------- proposals
    def get_bboxes(self, anchor_list, cls_scores, bbox_preds, img_metas, cfg, rescale=False):
        """Proposals of each image from this stage's anchors, ``[k, 5]``, as
        :meth:`RPNHead._get_bboxes_single` (mmdet ignored ``rescale`` here; so does this)."""
        if len(cls_scores) != len(bbox_preds):
            raise ValueError('cls_scores and bbox_preds need one entry per level')
        return [self._get_bboxes_single([s[i].detach() for s in cls_scores],
                                        [b[i].detach() for b in bbox_preds], None,
                                        anchor_list[i], meta, cfg)
                for i, meta in enumerate(img_metas)]

    def refine_bboxes(self, anchor_list, bbox_preds, img_metas):
        """The next stage's anchors: this stage's (detached) deltas applied, clipped to
        ``img_shape``."""
        return [[self.bbox_coder.decode(anchor_list[i][lvl],
                                        bbox_preds[lvl][i].detach().permute(1, 2, 0)
                                        .reshape(-1, 4), max_shape=meta['img_shape'])
                 for lvl in range(len(bbox_preds))]
                for i, meta in enumerate(img_metas)]


@MODELS.register_module()
class CascadeRPNHead(CheckpointOwnerMixin, nn.Module):
    """Cascade RPN: ``num_stages`` :class:`StageCascadeRPNHead` s, each on the previous one's
    refined anchors (and, when bridged, its features). Losses ``s{i}.loss_rpn_cls`` /
    ``s{i}.loss_rpn_reg`` per stage (each stage's weight is in its loss configs); proposals
    from the last stage with ``test_cfg``, in training too (mmdet ignores
    ``train_cfg.rpn_proposal`` here, and ``gt_bboxes_ignore``).

    Args:
        num_stages (int): number of stages, ``len(stages)``.
        stages (list[dict]): stage configs.
        train_cfg (list[dict] | None): one per stage.
        test_cfg (dict): proposal config of the last stage.
        with_cp (bool): ``'full'`` checkpointing of every level of every stage (not an mmdet
            argument; default False; a stage's own ``with_cp`` wins).

    A checkpoint owner of no units of its own: its stages' units (``stages.0.level0``, ...)
    are listed, planned and set through it.
    """

    #: object vs background, whatever the dataset's classes (NumClassCheckHook skips it)
    CHECK_NUM_CLASSES = False

    def __init__(self, num_stages, stages, train_cfg, test_cfg, init_cfg=None,
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if num_stages != len(stages):
            raise ValueError(f'num_stages={num_stages} but {len(stages)} stage configs')
        if train_cfg is not None and len(train_cfg) != num_stages:
            raise ValueError(f'train_cfg needs one config per stage ({num_stages}), got '
                             f'{len(train_cfg)}')
        self.num_stages = num_stages
        self.stages = nn.ModuleList()
        for i, stage in enumerate(stages):
            stage = dict(copy.deepcopy(stage), test_cfg=test_cfg,
                         train_cfg=train_cfg[i] if train_cfg is not None else None)
            stage.setdefault('with_cp', with_cp)
            stage.setdefault('cp_use_reentrant', cp_use_reentrant)
            self.stages.append(MODELS.build(stage))
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg
        self.init_cfg = init_cfg

    def init_weights(self):
        for stage in self.stages:
            stage.init_weights()

    def _run_stages(self, x, img_metas, train_inputs=None):
        """Every stage in turn; ``(anchor_list, cls_score, bbox_pred, losses)`` of the last."""
        featmap_sizes = [f.size()[-2:] for f in x]
        anchor_list, valid_flag_list = self.stages[0].get_anchors(featmap_sizes, img_metas,
                                                                  device=x[0].device)
        losses = dict()
        for i, stage in enumerate(self.stages):
            offset_list = stage.anchor_offset(anchor_list, stage.anchor_strides, featmap_sizes) \
                if stage.adapt_cfg['type'] == 'offset' else None
            x, cls_score, bbox_pred = stage(x, offset_list)
            if train_inputs is not None:
                stage_loss = stage.loss(anchor_list, valid_flag_list, cls_score, bbox_pred,
                                        train_inputs, img_metas)
                losses.update({f's{i}.{name}': value for name, value in stage_loss.items()})
            if i < self.num_stages - 1:
                anchor_list = stage.refine_bboxes(anchor_list, bbox_pred, img_metas)
        return anchor_list, cls_score, bbox_pred, losses

    def forward_train(self, x, img_metas, gt_bboxes, gt_labels=None, gt_bboxes_ignore=None,
                      proposal_cfg=None):
        """The stage losses, and with ``proposal_cfg`` (whatever it holds) also the last
        stage's proposals made with ``test_cfg``: ``(losses, proposal_list)``."""
        if gt_labels is not None:
            raise ValueError('CascadeRPNHead (an RPN) takes no gt_labels')
        anchor_list, cls_score, bbox_pred, losses = self._run_stages(x, img_metas, gt_bboxes)
        if proposal_cfg is None:
            return losses
        return losses, self.stages[-1].get_bboxes(anchor_list, cls_score, bbox_pred, img_metas,
                                                  self.test_cfg)

    def simple_test_rpn(self, x, img_metas):
        """Proposals of each image, ``[k, 5]``, from the last stage with ``test_cfg``."""
        anchor_list, cls_score, bbox_pred, _ = self._run_stages(x, img_metas)
        return self.stages[-1].get_bboxes(anchor_list, cls_score, bbox_pred, img_metas,
                                          self.test_cfg)

    def aug_test_rpn(self, x, img_metas):
        raise NotImplementedError('CascadeRPNHead does not support test-time augmentation')
