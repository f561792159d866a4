"""Load a script under ``tools/`` as a module: tests call its ``main(argv)`` in-process."""
import importlib.util
import os.path as osp

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def load_tool(relpath):
    """The module of ``tools/<relpath>`` (e.g. ``'test.py'``, ``'misc/print_config.py'``),
    executed afresh."""
    path = osp.join(ROOT, 'tools', relpath)
    name = 'ckptzoo_tool_' + osp.splitext(relpath)[0].replace('/', '_')
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
