import pytest

from ckptzoo.memory import format_budget, format_bytes, parse_budget


@pytest.mark.parametrize('value,expected', [
    ('6GB', 6 * 10 ** 9), ('5800MiB', 5800 * 2 ** 20), ('612368384B', 612368384),
    ('1.5GiB', int(1.5 * 2 ** 30)), ('512KB', 512000), ('3KiB', 3072), (' 12 MB ', 12 * 10 ** 6),
    (612368384, 612368384), (6e9, 6 * 10 ** 9), ('6e9', 6 * 10 ** 9), ('2048', 2048),
])
def test_sizes(value, expected):
    assert parse_budget(value) == expected


def test_fraction_of_the_device():
    assert parse_budget(0.9, device_total=1000) == 900
    assert parse_budget('0.5', device_total=1000) == 500
    assert parse_budget(1.0, device_total=1000) == 1000


@pytest.mark.parametrize('value', ['6GiBs', '6 gigabytes', 'GB', '', '6.GB.', '-1GB', '0MiB'])
def test_malformed_strings_name_what_is_allowed(value):
    with pytest.raises(ValueError, match=r"units B, KB, MB, GB, KiB, MiB, GiB .*got '"):
        parse_budget(value)


@pytest.mark.parametrize('value', [-1, 0, 0.0, -0.5, float('nan'), float('inf')])
def test_non_positive_numbers(value):
    with pytest.raises(ValueError, match=r'must be positive: a number of bytes.*fraction in '
                                         r'\(0, 1\]'):
        parse_budget(value)


def test_other_bad_input():
    with pytest.raises(ValueError, match='units are case-sensitive'):
        parse_budget('6gib')
    with pytest.raises(ValueError, match='one byte cannot hold a model'):
        parse_budget(1)
    for value in (True, None, [6], b'6GB'):
        with pytest.raises(TypeError, match='memory_budget must be a number of bytes'):
            parse_budget(value)


def test_fraction_without_a_gpu(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    with pytest.raises(ValueError, match='fraction of device memory needs a CUDA device'):
        parse_budget(0.9)


def test_format_bytes():
    assert format_bytes(3 * 2 ** 20) == '3.0 MiB'
    assert format_bytes(512) == '512 B'


def test_a_budget_is_echoed_in_the_users_unit():
    """``--budget 2GB`` printed as ``1.9 GiB`` alone reads as a mistake."""
    assert format_budget(parse_budget('2GB')) == '2 GB (1.9 GiB)'
    assert format_budget(parse_budget('8GB')) == '8 GB (7.5 GiB)'
    assert format_budget(parse_budget('500MB')) == '500 MB (476.8 MiB)'
    assert format_budget(parse_budget('6GiB')) == '6.0 GiB'
    assert format_budget(parse_budget('64MiB')) == '64.0 MiB'
    assert format_budget(612368385) == '584.0 MiB'


@pytest.mark.parametrize('value,size', [('2.5', '2.5'), (2.5, '2.5'), ('2.5B', '2.5'),
                                        ('1.5', '1.5'), ('1000.5', '1000.5')])
def test_fractional_byte_counts_are_refused(value, size):
    """``--budget 2.5`` was read as 2 bytes: a count of bytes must be whole."""
    with pytest.raises(ValueError, match=rf"memory_budget {value!r} is {size} bytes, not a whole "
                       rf"number: give a unit \('{size}GB', '{size}GiB'\), a whole number of "
                       r'bytes or a fraction in \(0, 1\] of the device memory \(a number of '
                       r'bytes \(612368384\), a number with one of the units'):
        parse_budget(value, device_total=1000)


def test_exact_decimal_sizes():
    assert parse_budget('2.01GB') == 2010000000  # float arithmetic gave 2009999999
    assert parse_budget('0.3MiB') == 314572  # sizes in KB and above round down to bytes
    assert parse_budget('1', device_total=1000) == 1000  # a unit-less string <= 1: a fraction
    assert parse_budget(2.0) == 2
