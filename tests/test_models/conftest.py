import pytest
from torch.utils import checkpoint as torch_cp


@pytest.fixture
def count_cp(monkeypatch):
    """Counts the calls into ``torch.utils.checkpoint.checkpoint`` (that is, real checkpoints)."""
    stats = dict(checkpoints=0)
    real = torch_cp.checkpoint

    def counting(fn, *args, **kwargs):
        stats['checkpoints'] += 1
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(torch_cp, 'checkpoint', counting)
    return stats
