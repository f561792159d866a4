"""mmdet 2.x ``mmdet/models/utils/res_layer.py``'s ``ResLayer``: blocks as an
``nn.Sequential`` (keys ``{i}.*``), a downsample when stride or width changes."""
import torch

from ckptzoo.models.utils import ResLayer, SimplifiedBasicBlock


def test_res_layer_stacks_blocks_and_downsamples_when_the_shape_changes():
    same = ResLayer(SimplifiedBasicBlock, 4, 4, 3, norm_cfg=None)
    assert len(same) == 3 and all(b.downsample is None for b in same)
    assert sorted(same.state_dict())[:2] == ['0.conv1.bias', '0.conv1.weight']
    wider = ResLayer(SimplifiedBasicBlock, 4, 8, 2, stride=2)
    assert wider[0].downsample is not None and wider[1].downsample is None
    assert wider(torch.randn(1, 4, 8, 8)).shape == (1, 8, 4, 4)
    last = ResLayer(SimplifiedBasicBlock, 4, 8, 2, stride=2, downsample_first=False)
    assert last[0].downsample is None and last[1].downsample is not None
