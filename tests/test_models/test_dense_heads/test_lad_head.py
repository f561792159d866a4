import pytest
import torch

from ckptzoo.models.dense_heads import LADHead, PAAHead
from ckptzoo.registry import build_head
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.test_models.test_dense_heads.test_paa_head import GTS, LABELS, _feats, _meta
from tests.test_models.test_dense_heads.test_paa_head import _head as _paa_head

one_thread = pytest.fixture(autouse=True)(_one_thread)


def _head(**kw):
    return _paa_head(type='LADHead', **kw)


def test_teacher_assignment_is_paas_and_the_student_loss_uses_it():
    teacher, paa = _head(), _paa_head()
    paa.load_state_dict(teacher.state_dict())
    assert isinstance(teacher, PAAHead) and isinstance(teacher, LADHead)
    metas = [_meta(), _meta()]
    with torch.no_grad():
        outs = teacher(_feats())
        assignment = teacher.get_label_assignment(*outs, GTS, LABELS, metas)
        labels, weights, targets, _, pos_inds, anchors, num_pos = paa._paa_assignment(
            outs[0], outs[1], GTS, LABELS, metas)
    assert torch.equal(assignment[0], labels) and torch.equal(assignment[4], pos_inds)
    assert assignment[6] == num_pos > 0
    torch.testing.assert_close(assignment[5], anchors[pos_inds])
    # a student with other weights learns on the teacher's assignment
    student = _head()
    with torch.no_grad():
        for p in student.parameters():
            p.add_(0.01)
    losses = student.forward_train(_feats(), assignment, metas, GTS, LABELS)
    assert set(losses) == {'loss_cls', 'loss_bbox', 'loss_iou'}
    assert all(torch.isfinite(v) and v > 0 for v in losses.values())
    sum(losses.values()).backward()
    assert all(p.grad is not None for p in student.parameters())
    # the box loss is unweighted, averaged over the positives
    with torch.no_grad():
        cls, reg, iou = student(_feats())
        _, flat_reg, _ = student._flatten(cls, reg, iou, 2)
        pred = student.bbox_coder.decode(assignment[5], flat_reg[pos_inds])
        expected = student.loss_bbox(pred, targets[pos_inds], avg_factor=num_pos)
        got = student.loss(cls, reg, iou, GTS, LABELS, metas, label_assignment_results=assignment)
    torch.testing.assert_close(got['loss_bbox'], expected)


def test_no_assignment_is_named():
    head = _head()
    with pytest.raises(ValueError, match='label_assignment_results'):
        head.loss(*head(_feats()), GTS, LABELS, [_meta(), _meta()])
    assert isinstance(build_head(dict(type='LADHead', num_classes=2, in_channels=4,
                                      norm_cfg=None, stacked_convs=0, feat_channels=4)),
                      LADHead)
