"""The cost table at any batch shape: linear in the pixels through the probed tables, on tables
built by hand, and against the measured peak of a small RetinaNet at a shape it was not probed
at."""
import copy
import json
import logging
import os.path as osp

import pytest

from ckptzoo.memory import (ShapeCostModel, apply_plan, predict_peak,
                            uniform_plan)
from tests.helpers.configs import tiny_voc_retinanet
from tests.helpers.plans import table_at

def test_two_tables_give_the_line_through_them():
    model = ShapeCostModel({(8, 8): table_at(64), (16, 16): table_at(256)})
    got, want = model.table_at((12, 12)), table_at(144)
    for g, w in zip(got.units, want.units):
        assert (g.kept, g.fwd_peak, g.bwd_peak) == (w.kept, w.fwd_peak, w.bwd_peak)
        assert g.fwd_time == pytest.approx(w.fwd_time)
        assert g.recompute_time['selective'] == pytest.approx(w.recompute_time['selective'])
    assert (got.fwd_base, got.bwd_base, got.tail_peak) == \
        (want.fwd_base, want.bwd_base, want.tail_peak)
    assert got.step_time == pytest.approx(want.step_time)
    assert got.fixed == want.fixed  # the weights unchanged, the batch scaled
    assert all(isinstance(b, int) for b in got.fwd_base + [got.tail_peak, got.step_peak])
    # a non-square shape of the same pixels is the same table; a probed shape is its table
    assert model.table_at((9, 16)).to_dict() == got.to_dict()
    assert model.table_at((16, 16)).to_dict() == table_at(256).to_dict()


def test_below_the_smallest_the_line_goes_on_clamped_at_zero():
    model = ShapeCostModel({(8, 8): table_at(64), (16, 16): table_at(256)})
    assert model.table_at((4, 4)).units[0].kept[None] == table_at(16).units[0].kept[None]
    steep = table_at(256)
    steep.tail_peak = 10 ** 6  # grows faster than the pixels: the line crosses zero below 8x8
    model = ShapeCostModel({(8, 8): table_at(64), (16, 16): steep})
    assert model.table_at((1, 1)).tail_peak == 0 and model.table_at((4, 16)).tail_peak == 2020


def test_nothing_is_extrapolated_beyond_the_largest():
    model = ShapeCostModel({(8, 8): table_at(64), (16, 16): table_at(256),
                            (32, 32): table_at(1024)})
    assert model.table_at((24, 24)).units[2].kept[None] == table_at(576).units[2].kept[None]
    assert model.table_at((10, 10)).fwd_base == table_at(100).fwd_base
    with pytest.raises(ValueError, match=r'batch shape 32x33 \(1056 pixels\) is larger than '
                                         r'the largest probed shape 32x32 \(1024 pixels\)'):
        model.table_at((32, 33))


def test_one_table_serves_smaller_shapes_only():
    model = ShapeCostModel({(16, 16): table_at(256)})
    assert model.table_at((8, 12)).to_dict() == table_at(256).to_dict()
    with pytest.raises(ValueError, match='17x16 .* larger than the largest probed shape 16x16'):
        model.table_at((17, 16))


def test_a_mode_probed_at_one_shape_is_scaled_as_the_plain_mode():
    """The smaller probe is one plain step: 'full' and 'selective' there follow plain."""
    model = ShapeCostModel({(8, 8): table_at(64, modes=(None, )), (16, 16): table_at(256)})
    small, large = table_at(64), table_at(256)
    mid = model.table_at((12, 12))
    for i, u in enumerate(mid.units):
        for mode in ('full', 'selective'):
            at_small = large.units[i].kept[mode] * small.units[i].kept[None] / \
                large.units[i].kept[None]
            want = round(at_small + (large.units[i].kept[mode] - at_small) * (144 - 64) / 192)
            assert u.kept[mode] == want
        rt = large.units[i].recompute_time['selective']
        at_small = rt * small.units[i].fwd_time / large.units[i].fwd_time
        assert u.recompute_time['selective'] == pytest.approx(
            at_small + (rt - at_small) * (144 - 64) / 192)
    zero = table_at(64, modes=(None, ))
    zero.units[0].bwd_peak[None] = 0  # plain 0 there: the scaled mode is 0 too
    model = ShapeCostModel({(16, 16): table_at(256), (8, 8): zero})
    assert model.table_at((8, 8)).units[0].bwd_peak['full'] == 0


def test_tables_of_another_model_or_bad_shapes_are_refused():
    other = table_at(256)
    other.units[1].name = 'v1'
    with pytest.raises(ValueError, match=r"probed at 8x8 and 16x16 differ in their units' "
                                         r"names \(\['u0', 'u1', 'u2'\] vs \['u0', 'v1'"):
        ShapeCostModel({(8, 8): table_at(64), (16, 16): other})
    chained = table_at(256)
    chained.chains = [(0, 2)]
    with pytest.raises(ValueError, match="differ in their units' chains"):
        ShapeCostModel({(8, 8): table_at(64), (16, 16): chained})
    with pytest.raises(ValueError, match='same pixel count'):
        ShapeCostModel({(8, 32): table_at(256), (16, 16): table_at(256)})
    with pytest.raises(ValueError, match=r'positive ints, got \(0, 8\)'):
        ShapeCostModel({(0, 8): table_at(64)})
    with pytest.raises(ValueError, match='at least one'):
        ShapeCostModel({})


def test_json_round_trip():
    model = ShapeCostModel({(8, 8): table_at(64, modes=(None, )), (16, 16): table_at(256)})
    data = json.loads(json.dumps(model.to_dict()))
    assert sorted(data['tables']) == ['16x16', '8x8']
    again = ShapeCostModel.from_dict(data)
    assert again.shapes == [(8, 8), (16, 16)]
    assert again.table_at((12, 12)).to_dict() == model.table_at((12, 12)).to_dict()
    with pytest.raises(ValueError, match='"HxW" with positive ints, got \'8by8\''):
        ShapeCostModel.from_dict(dict(tables={'8by8': table_at(64).to_dict()}))


# ------------------------------------------------------------------------------------------
# against measurement
# ------------------------------------------------------------------------------------------
ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


@pytest.fixture(scope='module')
def retinanet(tmp_path_factory):
    from ckptzoo.apis import build_training, set_random_seed
    from ckptzoo.memory.measure.probe import probe_batch, train_step
    tmp = tmp_path_factory.mktemp('shape_model')
    cfg = tiny_voc_retinanet(tmp, num_trainval=2)
    set_random_seed(0)
    run = build_training(cfg, logger=logging.getLogger('test_shape_model'))
    base = probe_batch(run, None)  # one batch (the same boxes) padded to every shape

    def at(shape):
        batch = copy.copy(base)
        img = base['img']
        batch['img'] = img.new_zeros(img.shape[:-2] + tuple(shape))
        batch['img'][..., :img.shape[-2], :img.shape[-1]] = img
        batch['img_metas'] = [dict(m, pad_shape=(*shape, 3), batch_input_shape=tuple(shape))
                              for m in base['img_metas']]
        return batch
    train_step(run, at((64, 64)))  # the optimizer state exists, as in every later step
    return run, at


# strides up to 128 (P7): 128x256 is a whole number of cells on every level, 192x192 is not
@pytest.mark.parametrize('between', [(128, 256), (192, 192)])
def test_the_table_between_two_probes_predicts_the_measured_peak(retinanet, between):
    """Probed at 128x128 (one plain step) and 256x256 (plain, full, selective), the table at a
    shape in between predicts the measured peak of the plain and of the all-'full' plan."""
    from ckptzoo.memory.measure.probe import measure_step, probe
    run, at = retinanet
    model = ShapeCostModel({(128, 128): probe(run, at((128, 128)), modes=(None, )),
                            (256, 256): probe(run, at((256, 256)))})
    table = model.table_at(between)
    errors = {}
    for mode in (None, 'full'):
        plan = uniform_plan(table, mode)
        apply_plan(run.runner.model, table, plan)
        measured, _ = measure_step(run, at(between))
        errors[mode] = (predict_peak(table, plan) - measured) / measured
    apply_plan(run.runner.model, table, uniform_plan(table, None))
    print(between, errors)
    assert all(abs(e) < 0.02 for e in errors.values()), errors
