"""The merged config dump never lands on a file the config is read from."""
import os

import pytest

from ckptzoo.utils.config_dump import config_dump_path, config_source_files


def test_usual_name_when_free(tmp_path):
    (tmp_path / 'cfg.py').write_text('a = 1\n')
    work = tmp_path / 'work'
    assert config_dump_path(str(tmp_path / 'cfg.py'), str(work), '20240101_000000') == (
        str(work / 'cfg.py'), None)


def test_config_in_the_work_dir_and_base_in_the_work_dir(tmp_path):
    configs, work = tmp_path / 'configs', tmp_path / 'work'
    configs.mkdir()
    work.mkdir()
    (work / 'exp.py').write_text('a = 1\n')  # a _base_ file kept in the work dir
    (configs / 'exp.py').write_text("_base_ = ['../work/exp.py']\nb = 2\n")
    cfg = str(configs / 'exp.py')
    assert config_source_files(cfg) == {os.path.realpath(configs / 'exp.py'),
                                        os.path.realpath(work / 'exp.py')}
    assert config_dump_path(cfg, str(work), '20240101_000000') == (
        str(work / '20240101_000000.py'), str(work / 'exp.py'))
    # the config itself, reached through another spelling of the work dir
    os.symlink(configs, tmp_path / 'link')
    assert config_dump_path(cfg, str(tmp_path / 'link'), 'T') == (
        str(tmp_path / 'link' / 'T.py'), str(tmp_path / 'link' / 'exp.py'))


def test_refuses_when_every_name_is_a_source(tmp_path):
    (tmp_path / 'T.py').write_text('a = 1\n')
    (tmp_path / 'cfg.py').write_text("_base_ = ['./T.py']\n")
    with pytest.raises(FileExistsError, match='choose another --work-dir'):
        config_dump_path(str(tmp_path / 'cfg.py'), str(tmp_path), 'T')
