"""TridentFasterRCNN / TridentRoIHead end to end on a tiny model: mmdet's losses over
``num_branch`` copies of each image's metas and boxes, branch-merged detections at test, every
RoI unit exact under checkpointing. The audit against mmdet 2.28.2 (same weights, batch and
seed; ``test_branch_idx`` 1 and -1) found losses, gradients, BN buffers and detections bitwise
equal."""
import copy

import pytest
import torch

from ckptzoo.registry import build_detector

from tests.helpers.checkpointing import one_thread
from tests.helpers.detectors import img_meta
from tests.helpers.rcnn_variants import masks_batch, train_step
from tests.helpers.trident import trident_cfg

one_thread = pytest.fixture(autouse=True)(one_thread)


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(trident_cfg(**kw))


def test_train_step_runs_every_branch_and_full_checkpointing_is_exact():
    plain = _model()
    state = copy.deepcopy(plain.state_dict())
    batch = masks_batch(with_mask=False)
    seen = []
    plain.rpn_head.register_forward_hook(lambda m, i, o: seen.append(i[0][0].shape[0]))
    ref = train_step(plain, batch)
    assert list(ref[0]) == ['loss_rpn_cls', 'loss_rpn_bbox', 'loss_cls', 'acc', 'loss_bbox',
                            'loss']
    assert seen == [6]  # 2 images x 3 branches
    model = _model()
    model.load_state_dict(state)
    model.set_checkpoint_plan({'*': 'full'})
    got = train_step(model, batch)
    assert got[0] == pytest.approx(ref[0], rel=1e-6, abs=1e-7)
    for name, grad in ref[1].items():
        torch.testing.assert_close(got[1][name], grad, rtol=0, atol=1e-6)
    for name, buf in ref[2].items():
        torch.testing.assert_close(got[2][name], buf, rtol=0, atol=0)


@pytest.mark.parametrize('test_branch_idx', [1, -1])
def test_simple_test_merges_the_branches_per_image(test_branch_idx):
    model = _model(test_branch_idx=test_branch_idx).eval()
    img = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        results = model.simple_test(img, [img_meta(), img_meta(56, 60)], rescale=True)
        alone = model.simple_test(img[1:], [img_meta(56, 60)], rescale=True)
    assert len(results) == 2 and len(results[0]) == 3
    for a, b in zip(results[1], alone[0]):  # an image's result does not depend on the batch
        assert a.shape == b.shape
        torch.testing.assert_close(torch.from_numpy(a), torch.from_numpy(b), rtol=1e-4,
                                   atol=1e-3)


def test_branch_settings_must_agree():
    cfg = trident_cfg()
    cfg['roi_head']['test_branch_idx'] = -1
    with pytest.raises(ValueError, match='test_branch_idx'):
        build_detector(cfg)


def test_aug_test_scores_each_branch_on_its_own_features(tmp_path):
    """With proposals in branch ``k`` only, the augmented result is branch ``k``'s features
    scored alone (mmdet scores branch 0's features for every branch)."""
    from ckptzoo.models.roi_heads import StandardRoIHead
    from tests.helpers.coco_tta import flip_aug_batch
    model = _model(test_branch_idx=-1).eval()
    batch = flip_aug_batch(tmp_path)
    imgs, metas = batch['img'], batch['img_metas']
    with torch.no_grad():
        feats = model.extract_feats(imgs)
        assert feats[0][0].shape[0] == 3  # the branches, batch-major
        merged = model.rpn_head.aug_test_rpn(feats, [m * 3 for m in metas])
        assert len(merged) == 3 and all(p.shape[0] > 0 for p in merged)
        for k in (1, 2):
            only_k = [p if i == k else p[:0] for i, p in enumerate(merged)]
            got = model.roi_head.aug_test_bboxes(feats, metas, only_k, model.roi_head.test_cfg)
            branch_k = [[lvl[k:k + 1] for lvl in x] for x in feats]
            want = StandardRoIHead.aug_test_bboxes(model.roi_head, branch_k, metas,
                                                   [merged[k]], model.roi_head.test_cfg)
            assert got[0].shape[0] > 0
            torch.testing.assert_close(got[0], want[0])
            torch.testing.assert_close(got[1], want[1])
        (boxes, ) = model(return_loss=False, **batch)
    assert len(boxes) == 3 and sum(len(b) for b in boxes) > 0


@pytest.mark.parametrize('test_branch_idx', [1, -1])
def test_aug_test_of_mirrored_views_mirrors(tmp_path, test_branch_idx):
    import numpy as np
    from tests.helpers.coco_tta import ORI_SHAPE, flip_aug_batch, swapped_views
    model = _model(test_branch_idx=test_branch_idx).eval()
    batch = flip_aug_batch(tmp_path)
    w = ORI_SHAPE[1]
    with torch.no_grad():
        (boxes, ) = model(return_loss=False, **copy.deepcopy(batch))
        (m_boxes, ) = model(return_loss=False, **swapped_views(batch))
    assert sum(len(b) for b in boxes) > 0
    for dets, m_dets in zip(boxes, m_boxes):
        order, m_order = np.argsort(-dets[:, 4]), np.argsort(-m_dets[:, 4])
        mirror = dets[order].copy()
        mirror[:, 0], mirror[:, 2] = w - dets[order, 2], w - dets[order, 0]
        np.testing.assert_allclose(m_dets[m_order], mirror, atol=1e-3)
