"""The front page and docs/ point at things that exist, and their commands use real options.

Pages move and tools change under them: a link to a moved page, an image path written for the
root but read from docs/, a config that was renamed or a flag that was dropped would all still
read well. Everything here is static (no tool is imported or run), so it takes a second.
"""
import ast
import glob
import itertools
import os.path as osp
import re
import unicodedata

import pytest

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
PAGES = ['README.md'] + sorted(
    osp.relpath(p, ROOT) for p in glob.glob(osp.join(ROOT, 'docs', '*.md')))
# Paths the docs name inside the installed mmdet 2.28.2 wheel, not in this repository.
NOT_OURS = ('configs/retinanet/', 'configs/swin/', 'configs/pascal_voc/')
# A record of runs as they happened: its commands are those of their day.
HISTORY = ('docs/benchmarks_log.md',)

FENCE = re.compile(r'^```.*?^```[ \t]*$', re.M | re.S)
LINK = re.compile(r'!?\[[^\]]*\]\(([^)\s]+)\)|<img [^>]*src="([^"]+)"')
PATH = re.compile(r'(?<![\w./-])((?:configs|tools|tests|docs|\.ci)/[\w.{},*/-]*[\w*}])')
TOOL = re.compile(r'(?<![\w./-])(tools/[\w/]+\.py)((?:\s+\S+)*)')
MODULE = re.compile(r'python -m (ckptzoo(?:\.\w+)+)')


def _read(page):
    with open(osp.join(ROOT, page), encoding='utf-8') as f:
        return f.read()


def _prose(text):
    return FENCE.sub('', text)


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but ``-``/``_`` dropped."""
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', heading.strip().lower())
    kept = ''.join(c for c in text if c in ' -' or
                   unicodedata.category(c)[0] in 'LMN' or unicodedata.category(c) == 'Pc')
    return kept.replace(' ', '-')


def anchors(page):
    seen, out = {}, set()
    for line in _prose(_read(page)).splitlines():
        m = re.match(r'#{1,6}\s+(.*?)\s*#*\s*$', line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f'{base}-{n}')
    return out


def _expand(path):
    """``a/{b,c}.py`` -> ``a/b.py``, ``a/c.py`` (the shell's brace expansion)."""
    parts = re.split(r'\{([^{}]*)\}', path)
    choices = [[p] if i % 2 == 0 else p.split(',') for i, p in enumerate(parts)]
    return [''.join(c) for c in itertools.product(*choices)]


def _commands(text):
    """Each command line: fenced lines (continuations joined) and inline code spans."""
    lines = []
    for block in FENCE.findall(text):
        lines += block.replace('\\\n', ' ').splitlines()[1:-1]
    lines += [m.replace('\n', ' ') for m in re.findall(r'`([^`]+)`', _prose(text))]
    return lines


def _options(tool):
    """The ``--options`` a tool's argparse knows, those with ``choices``, its string constants."""
    with open(osp.join(ROOT, tool), encoding='utf-8') as f:
        tree = ast.parse(f.read())
    options, with_choices, strings = set(), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.add(node.value)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == 'add_argument'):
            names = {a.value for a in node.args
                     if isinstance(a, ast.Constant) and str(a.value).startswith('-')}
            options |= names
            if any(k.arg == 'choices' for k in node.keywords):
                with_choices |= names
    return options, with_choices, strings


def test_slug_matches_github():
    assert slug("A. RetinaNet R50-FPN at 320 px, `'full'` × 2") == 'a-retinanet-r50-fpn-at-320-px-full--2'
    assert slug('I. Runs C and D — idle') == 'i-runs-c-and-d--idle'
    assert _expand('tests/test_{a,b}.py') == ['tests/test_a.py', 'tests/test_b.py']


@pytest.mark.parametrize('page', PAGES)
def test_links_resolve(page):
    here = osp.dirname(osp.join(ROOT, page))
    bad = []
    for m in LINK.finditer(_prose(_read(page))):
        target = m.group(1) or m.group(2)
        if re.match(r'[a-z]+:', target):
            continue
        path, _, anchor = target.partition('#')
        full = osp.normpath(osp.join(here, path)) if path else osp.join(ROOT, page)
        if not osp.exists(full):
            bad.append(f'{target}: no such file')
        elif anchor and full.endswith('.md') and anchor not in anchors(osp.relpath(full, ROOT)):
            bad.append(f'{target}: no heading with that anchor')
    assert not bad, f'{page}: ' + '; '.join(bad)


@pytest.mark.parametrize('page', PAGES)
def test_named_paths_exist(page):
    text = _read(page)
    bad = []
    for named in set(PATH.findall(text)):
        if named.startswith(NOT_OURS):
            continue
        for path in _expand(named):
            if not glob.glob(osp.join(ROOT, path)):
                bad.append(path)
    for module in set(MODULE.findall(text)):
        path = module.replace('.', '/')
        if not (osp.exists(osp.join(ROOT, path + '.py'))
                or osp.exists(osp.join(ROOT, path, '__init__.py'))):
            bad.append(module)
    assert not bad, f'{page} names paths that do not exist: {sorted(bad)}'


@pytest.mark.parametrize('page', [p for p in PAGES if p not in HISTORY])
def test_commands_use_real_options(page):
    bad = []
    for line in _commands(_read(page)):
        for m in TOOL.finditer(line):
            tool = m.group(1)
            if not osp.exists(osp.join(ROOT, tool)):
                continue  # test_named_paths_exist reports it
            options, with_choices, strings = _options(tool)
            flag = None
            for token in m.group(2).split():
                if token in ('&&', '||', ';', '|', '#') or token.startswith('#'):
                    break
                token = token.strip('[]')
                if token.startswith('--'):
                    flag = token.split('=')[0]
                    if flag not in options:
                        bad.append(f'{tool} {flag}')
                elif (flag in with_choices and re.fullmatch(r'[a-z][a-z0-9_]*', token)
                      and token not in strings):
                    bad.append(f'{tool} {flag} {token}')
    assert not bad, f'{page}: unknown options or choices: {bad}'
