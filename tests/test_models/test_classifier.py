import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from ckptzoo.datasets import SyntheticClassificationDataset
from ckptzoo.registry import build_model

from tests.helpers.checkpointing import one_thread

BACKBONE = dict(type='ResNet', depth=18, base_channels=8, norm_eval=False)


_one_thread = pytest.fixture(autouse=True)(one_thread)


def _model(**head):
    head = dict(dict(num_classes=4, in_channels=64, topk=(1, 2)), **head)
    return build_model(dict(type='ImageClassifier', backbone=BACKBONE,
                            neck=dict(type='GlobalAveragePooling'), head=head))


def test_sgd_steps_reduce_loss_and_learn():
    torch.manual_seed(0)
    model = _model()
    data = SyntheticClassificationDataset(num_samples=64, num_classes=4, img_size=32, seed=0)
    loader = DataLoader(data, batch_size=16, shuffle=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    first_batch = next(iter(loader))
    model.train()
    with torch.no_grad():
        before = model(**first_batch)['loss'].item()
    for _ in range(4):
        for batch in loader:
            out = model.train_step(batch, opt)
            assert set(out['log_vars']) == {'loss', 'accuracy_top-1', 'accuracy_top-2'}
            assert out['num_samples'] == 16
            opt.zero_grad()
            out['loss'].backward()
            opt.step()
    with torch.no_grad():
        after = model(**first_batch)['loss'].item()
    assert after < 0.5 * before, (before, after)
    model.eval()
    with torch.no_grad():
        results = model(first_batch['img'], return_loss=False)
    assert len(results) == 16 and results[0].shape == (4, )
    np.testing.assert_allclose(np.stack(results).sum(1), 1.0, rtol=1e-5)
    acc = data.evaluate(results, indices=list(range(16)))['accuracy_top-1']
    assert acc >= 75.0, acc


def test_forward_train_outputs_and_label_smoothing():
    torch.manual_seed(0)
    img = torch.randn(4, 3, 32, 32)
    label = torch.tensor([0, 1, 2, 3])
    plain = _model().eval()
    smooth = _model(label_smoothing=0.2).eval()
    smooth.load_state_dict(plain.state_dict())
    logits = plain.head(plain.extract_feat(img))
    assert logits.shape == (4, 4)
    out = plain.forward_train(img, label)
    torch.testing.assert_close(out['loss'], F.cross_entropy(logits, label))
    out_s = smooth.forward_train(img, label)
    expected = F.cross_entropy(logits, label, label_smoothing=0.2)
    torch.testing.assert_close(out_s['loss'], expected)
    # by hand: (1 - eps) * NLL + eps * mean over classes of -log p
    logp = logits.log_softmax(1)
    by_hand = (0.8 * -logp[range(4), label] + 0.2 * -logp.mean(1)).mean()
    torch.testing.assert_close(out_s['loss'], by_hand)
    assert abs(out_s['loss'].item() - out['loss'].item()) > 1e-4
    # mmcls's LabelSmoothLoss spelling gives the same loss
    mmcls = _model(loss=dict(type='LabelSmoothLoss', label_smooth_val=0.2, loss_weight=1.0))
    mmcls.load_state_dict(plain.state_dict())
    torch.testing.assert_close(mmcls.eval().forward_train(img, label)['loss'], expected)
    pred = logits.argmax(1)
    assert out['accuracy_top-1'].item() == pytest.approx((pred == label).float().mean() * 100)


def test_in_channels_inferred_and_bad_config():
    model = build_model(dict(type='ImageClassifier', backbone=BACKBONE,
                             head=dict(num_classes=3)))
    assert model.head.fc.in_features == 64
    densenet = dict(type='DenseNet', arch=dict(growth_rate=4, depths=(2, 2), init_channels=8),
                    out_indices=(0, ))
    model = build_model(dict(type='ImageClassifier', backbone=densenet,
                             head=dict(num_classes=3)))
    assert model.head.fc.in_features == 16
    assert model.forward_train(torch.randn(2, 3, 32, 32), torch.tensor([0, 2]))['loss'] > 0
    with pytest.raises(ValueError, match="neck must be None or dict"):
        build_model(dict(type='ImageClassifier', backbone=BACKBONE,
                         neck=dict(type='FPN'), head=dict(num_classes=3)))
    with pytest.raises(ValueError, match=r'topk must be ints in 1..num_classes \(3\), got \(5,\)'):
        build_model(dict(type='ImageClassifier', backbone=BACKBONE,
                         head=dict(num_classes=3, topk=5)))
    with pytest.raises(ValueError, match="head loss type must be one of.*'FocalLoss'"):
        build_model(dict(type='ImageClassifier', backbone=BACKBONE,
                         head=dict(num_classes=3, loss=dict(type='FocalLoss'))))
