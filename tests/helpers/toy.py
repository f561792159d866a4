"""A BN-free toy model and data for runner tests (shared by the runner test modules)."""
import logging
import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

from ckptzoo.models.base import BaseModel
from ckptzoo.registry import MODELS, DATASETS


@MODELS.register_module(force=True)
class ToyRegressor(BaseModel):
    """Two linear layers and an MSE loss: no BatchNorm, so accumulation equals the big batch."""

    def __init__(self, in_features=4, hidden=8, init_cfg=None):
        super().__init__(init_cfg)
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, 1)

    def forward_train(self, img, target, **kwargs):
        pred = self.fc2(torch.tanh(self.fc1(img))).squeeze(-1)
        return dict(loss_mse=((pred.float() - target) ** 2).mean())

    def forward_test(self, img, **kwargs):
        return list(self.fc2(torch.tanh(self.fc1(img))).squeeze(-1).detach().cpu().numpy())


@MODELS.register_module(force=True)
class DropoutRegressor(ToyRegressor):
    """ToyRegressor with dropout, whose training step also draws from numpy and ``random`` (as
    multi-scale steps do): its training depends on all of the trainer's generators."""

    def __init__(self, p=0.5, **kwargs):
        super().__init__(**kwargs)
        self.drop = nn.Dropout(p)

    def forward_train(self, img, target, **kwargs):
        scale = 1 + 0.1 * float(np.random.rand()) + 0.1 * random.random()
        pred = self.fc2(self.drop(torch.tanh(self.fc1(img * scale)))).squeeze(-1)
        return dict(loss_mse=((pred.float() - target) ** 2).mean())


@DATASETS.register_module(force=True)
class ToyDataset(Dataset):

    def __init__(self, num_samples=18, in_features=4, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(num_samples, in_features, generator=g)
        w = torch.randn(in_features, generator=g)
        self.y = torch.sin(self.x @ w) + 0.1 * torch.randn(num_samples, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return dict(img=self.x[i], target=self.y[i])


def make_model(seed=0):
    torch.manual_seed(seed)
    return ToyRegressor()


def loader(dataset, batch_size=1, batch_sampler=None):
    if batch_sampler is not None:
        return DataLoader(dataset, batch_sampler=batch_sampler)
    return DataLoader(dataset, batch_size=batch_size, shuffle=False)


def quiet_logger():
    # a leaf of its own: a level set on 'ckptzoo.test' would silence every test's run logger
    logger = logging.getLogger('ckptzoo.test.quiet')
    logger.setLevel(logging.WARNING)
    return logger


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])
