"""The attention arena (``tools/analysis_tools/compare_attentions.py``): where a config's model
holds its attentions, the shortened schedule, one-line refusals, and a whole run on a demo that
writes the record and plots, read back by a second run and refused for other settings."""
import json

import pytest
from mmengine.config import Config

import mmvisattn  # noqa: F401
from mmvisattn.analysis.compare_attentions import attention_slots, shortened, table, with_attention
from mmvisattn.registry import models_of_scope

from ..conftest import REPO, run_tool

VIL = 'configs/vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py'
SEGFORMER = 'configs/segformer_rwgka/segformer_mit-b0-rwgka_1xb8-600i_shapes-cityscapes-128.py'
TOOL = 'tools/analysis_tools/compare_attentions.py'


def config(path: str) -> Config:
    return Config.fromfile(REPO / path)


@pytest.mark.parametrize('path, slots', [
    (VIL, [('backbone', 'attn_cfg')]),
    ('configs/smca/deit-ripple-demo_1xb32-300i_shapes-imagenet-64.py',
     [('backbone', 'ripple_cfg'), ('backbone', 'attn_cfg')]),
    ('configs/smca/smca_r18_1xb8-600i_shapes-coco-128.py', [('encoder', 'layer_cfg', 'attn_cfg')]),
    ('configs/demo/retinanet_r18_fpn_1xb8-600i_shapes-coco-128.py', []),
])
def test_slots_are_found_in_backbones_and_layers(path, slots):
    cfg = config(path)
    assert attention_slots(cfg.model, models_of_scope(cfg.default_scope)) == slots


def test_every_slot_gets_the_attention_and_nothing_else():
    cfg = config('configs/smca/deit-ripple-demo_1xb32-300i_shapes-imagenet-64.py')
    swapped = with_attention(cfg, 'SpatialReductionAttention:sr_ratio=2')
    assert swapped.model.backbone.ripple_cfg == swapped.model.backbone.attn_cfg == dict(
        type='SpatialReductionAttention', sr_ratio=2)
    assert (
        cfg.model == config('configs/smca/deit-ripple-demo_1xb32-300i_shapes-imagenet-64.py').model
    )  # a copy


def test_schedule_is_shortened_in_proportion():
    cfg = shortened(config(VIL), 150)
    assert cfg.train_cfg.max_iters == cfg.train_cfg.val_interval == 150
    warmup, steps = cfg.param_scheduler
    assert (warmup.begin, warmup.end) == (0, 12) and steps.end == 150 and steps.milestones == [112]
    assert cfg.default_hooks.checkpoint == dict(type='CheckpointHook', interval=-1, save_last=False)


@pytest.mark.parametrize('args, message', [
    ([VIL, '--attentions', 'NoSuchAttention'],
     "error: --attentions NoSuchAttention: unknown attention type 'NoSuchAttention'"),
    (['configs/demo/retinanet_r18_fpn_1xb8-600i_shapes-coco-128.py'],
     'error: the model holds no attention to swap'),
    ([VIL, '--sizes', '64'], '--sizes takes at least two distinct positive sides'),
    ([VIL, '--jobs', '0'], '--iters, --batch, --repeats and --jobs positive ones'),
])
def test_bad_requests_are_refused_in_one_line(args, message, tmp_path):
    done = run_tool([TOOL, *args, '--out-dir', tmp_path], cwd=REPO, check=False)
    assert done.returncode != 0 and message in done.stderr
    assert 'Traceback' not in done.stderr and not list(tmp_path.iterdir())


def test_arena_run_writes_record_and_plots_and_resumes(workspace, tmp_path):
    out, records = tmp_path / 'arena', tmp_path / 'records'
    args = [TOOL, REPO / SEGFORMER, '--attentions', 'LinearAttention', '--seeds', '0', '1',
            '--iters', '2', '--sizes', '32', '64', '--repeats', '1', '--jobs', '2', '--out-dir',
            out]
    run_tool(args + ['--record-dir', records], cwd=workspace)
    results = json.loads((out / 'arena.json').read_text())
    assert (
        results['metric'] == 'mIoU'
        and results['measured_part'] == 'backbone'
        and results['iters'] == 2
    )
    for row in results['attentions']:
        assert 'errors' not in row and row['params'] > 0 and row['gmacs'] > 0
        assert [point['size'] for point in row['curve']] == [32, 64]
        # the first stage's map
        assert [point['tokens'] for point in row['curve']] == [8 * 8, 16 * 16]
        assert set(row['metric']) == {'0', '1'} and row['spread'] is not None
    assert {path.suffix for path in (out / 'cost.png', out / 'metric.png')
            if path.stat().st_size} == {'.png'}
    record, *plots = sorted(records.iterdir())
    assert record.name.endswith(
        '_segformer-mit-b0-rwgka-1xb8-600i-shapes-cityscapes-128_arena.json'
    )
    assert [path.name[len(record.stem):] for path in plots] == ['_cost.png', '_metric.png']
    assert json.loads(record.read_text())['results'] == results
    assert '| LinearAttention |' in table(results)

    logs = {path: path.stat().st_mtime_ns for path in out.rglob('*.log')}
    run_tool(args, cwd=workspace)  # read back, nothing rerun
    assert {path: path.stat().st_mtime_ns for path in out.rglob('*.log')} == logs
    assert json.loads((out / 'arena.json').read_text())['attentions'] == results['attentions']
    done = run_tool([*args[:-2], '--iters', '3', '--out-dir', out], cwd=workspace, check=False)
    assert done.returncode != 0 and 'was written for other settings' in done.stderr
