"""The declared Python minimum is the one the pinned packages really need."""
import configparser
import importlib.metadata
import os.path as osp
import re

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def _python_requires():
    cfg = configparser.ConfigParser()
    cfg.read(osp.join(ROOT, 'setup.cfg'))
    return SpecifierSet(cfg['options']['python_requires'])


def _pins():
    with open(osp.join(ROOT, '.ci', 'constraints.txt')) as f:
        return [line.split('#')[0].strip().split('==') for line in f
                if line.split('#')[0].strip()]


def _lowest_python(spec):
    """The lowest 3.x that ``spec`` (a Requires-Python) admits."""
    return next(Version(f'3.{minor}') for minor in range(0, 30)
                if SpecifierSet(spec or '').contains(f'3.{minor}.99'))


def test_python_requires_is_the_pins_minimum():
    installed = []
    for name, version in _pins():
        try:
            meta = importlib.metadata.metadata(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional extra that is not installed here
        if meta['Version'] == version:
            installed.append((name, _lowest_python(meta.get('Requires-Python'))))
    if not any(name == 'numpy' for name, _ in installed):
        pytest.skip('the pinned versions are not installed')
    needed = max(v for _, v in installed)
    declared = _python_requires()
    assert _lowest_python(str(declared)) == needed, (declared, installed)
    with open(osp.join(ROOT, 'README.md')) as f:
        claims = set(re.findall(r'Python (3\.\d+)\+', f.read()))
    assert claims == {str(needed)}
