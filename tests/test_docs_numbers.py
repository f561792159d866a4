"""The training results the docs quote are the ones ``tools/misc/doc_numbers.py`` produced
(stored in ``docs/results/doc_numbers.json``): each quote below, formatted from that file, is
in its page. A number edited by hand, or a run re-made without its docs, fails here; the script
itself (``--check``) retrains and compares the file with the code as it is."""
import json
import os.path as osp
import re
from decimal import ROUND_HALF_UP, Decimal

import pytest

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
RESULTS = osp.join(ROOT, 'docs', 'results', 'doc_numbers.json')

#: run -> [(page, quote)], the quote formatted with the run's numbers (``@`` read as ``_``)
QUOTES = {
    'retinanet_cp': [
        ('README.md', 'Epoch(val) [4][16] mAP: {mAP_4:.4f}'),
        ('README.md', 'Epoch(val) [8][16] mAP: {mAP_8:.4f}'),
        ('README.md', 'Epoch(val) [12][16] mAP: {mAP_12:.4f}'),
        ('README.md', 'loss: {last_loss:.4f}, grad_norm'),
        ('README.md', "the first log line of epoch 1 reads `loss: {first_loss:.4f}`"),
    ],
    'fcos_r18_synthetic_coco': [
        ('docs/model_zoo.md', 'fcos_r18_fpn_synthetic_coco_cp.py` reached **bbox_mAP '
                              '{bbox_mAP_12:.3f}** ({bbox_mAP_4:.3f} at epoch 4, '
                              '{bbox_mAP_8:.3f} at 8;'),
    ],
    'retinanet_r18_synthetic_coco': [
        ('docs/model_zoo.md', 'retinanet_r18_fpn_synthetic_coco_cp.py` reached **bbox_mAP '
                              '{bbox_mAP_12:.3f}** ({bbox_mAP_4:.3f} at epoch 4, '
                              '{bbox_mAP_8:.3f} at 8;'),
    ],
    'mask_rcnn_r18_synthetic_coco': [
        ('README.md', '**bbox_mAP {bbox_mAP_12:.3f}, segm_mAP {segm_mAP_12:.3f}** after 12 epochs'),
        ('docs/model_zoo.md', '**bbox_mAP {bbox_mAP_12:.3f} and segm_mAP {segm_mAP_12:.3f}** '
                              'after its 12 epochs'),
        ('docs/model_zoo.md', '{bbox_mAP_4:.3f} bbox at epoch 4, {bbox_mAP_8:.3f} at 8'),
    ],
    'cascade_mask_rcnn_r18_synthetic_coco': [
        ('docs/model_zoo.md', '**bbox_mAP {bbox_mAP_12:.3f}, segm_mAP {segm_mAP_12:.3f}** after '
                              '12 epochs ({bbox_mAP_4:.3f} / {segm_mAP_4:.3f} at epoch 4, '
                              '{bbox_mAP_8:.3f} / {segm_mAP_8:.3f} at 8)'),
    ],
    'yolox_tiny_synthetic_coco': [
        ('docs/model_zoo.md', 'yolox_tiny_synthetic_coco_cp.py` reached **bbox_mAP '
                              '{bbox_mAP_24:.3f}** ({bbox_mAP_8:.3f} at epoch 8, '
                              '{bbox_mAP_16:.3f} at 16)'),
    ],
}


class _Stored(float):
    """A stored number, rounded half up from the digits the log printed (0.9055 -> 0.906, as
    a reader rounds it; float formatting would give 0.905 from the binary value)."""

    def __format__(self, spec):
        digits = int(re.fullmatch(r'\.(\d+)f', spec).group(1))
        return str(Decimal(repr(float(self))).quantize(Decimal(1).scaleb(-digits),
                                                       rounding=ROUND_HALF_UP))


def _numbers():
    with open(RESULTS) as f:
        stored = json.load(f)
    return {run: {k.replace('@', '_'): _Stored(v) for k, v in entry['numbers'].items()}
            for run, entry in stored.items()}


def _page(name):
    with open(osp.join(ROOT, name)) as f:
        return re.sub(r'\s+', ' ', f.read())


@pytest.mark.parametrize('run', sorted(QUOTES))
def test_docs_quote_the_stored_numbers(run):
    numbers = _numbers()
    assert run in numbers, f'{run} is quoted in the docs but not in {RESULTS}'
    for page, quote in QUOTES[run]:
        text = quote.format(**numbers[run])
        assert re.sub(r'\s+', ' ', text) in _page(page), f'{page} does not say {text!r}'


def test_every_stored_run_is_one_the_script_makes():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'doc_numbers', osp.join(ROOT, 'tools', 'misc', 'doc_numbers.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert set(_numbers()) <= set(module.RUNS)
