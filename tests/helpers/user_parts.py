"""Model parts as a user registers them (``custom_imports``), written without ckptzoo's
checkpoint units: ckptzoo derives their units from their module trees."""
import torch.nn as nn

from ckptzoo.registry import MODELS


def _conv_block(cin, cout, stride=1, drop=0.0):
    layers = [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
              nn.ReLU(inplace=True)]
    return nn.Sequential(*layers, nn.Dropout(drop)) if drop else nn.Sequential(*layers)


class _Residual(nn.Module):
    def __init__(self, channels, drop):
        super().__init__()
        self.body = _conv_block(channels, channels, drop=drop)

    def forward(self, x):
        return x + self.body(x)


@MODELS.register_module(force=True)
class UserStageNet(nn.Module):
    """A stem, then ``nn.Sequential`` stages of blocks with dropout (units ``stem`` and
    ``stages.{i}.{j}``, each stage a chain); returns the stages ``out_indices`` names."""

    def __init__(self, width=8, depths=(2, 2, 2), out_indices=(1, 2), drop=0.1):
        super().__init__()
        self.stem = _conv_block(3, width, stride=2)
        self.stages = nn.ModuleList()
        for depth in depths:
            blocks = [_conv_block(width, width * 2, stride=2)]
            width *= 2
            blocks += [_Residual(width, drop) for _ in range(depth - 1)]
            self.stages.append(nn.Sequential(*blocks))
        self.out_indices = out_indices

    def forward(self, x):
        x, outs = self.stem(x), []
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i in self.out_indices:
                outs.append(x)
        return tuple(outs)


@MODELS.register_module(force=True)
class UserListNet(nn.Module):
    """Blocks in an ``nn.ModuleList`` that its own forward loops over (each block a unit of
    its own), and a keyword argument to forward."""

    def __init__(self, width=8, depth=3):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, 2, 1)
        self.blocks = nn.ModuleList(_Residual(width, 0.1) for _ in range(depth))

    def forward(self, x, scale=1.0):
        x = self.stem(x)
        for block in self.blocks:
            x = block(x) * scale
        return (x, )


@MODELS.register_module(force=True)
class UserConvNeck(nn.Module):
    """Plain convs only, no block: the whole neck is one coarse unit."""

    def __init__(self, in_channels=(16, 32), out_channels=16):
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(c, out_channels, 1) for c in in_channels)

    def forward(self, feats):
        return tuple(conv(f) for conv, f in zip(self.lateral, feats))


@MODELS.register_module(force=True)
class UserCheckpointedNet(UserStageNet):
    """Takes ``with_cp`` itself (the class checkpoints as it likes): the derived units start
    plain and the flag is the class's."""

    def __init__(self, with_cp=False, **kwargs):
        super().__init__(**kwargs)
        self.with_cp = with_cp
