"""The demo's spread (``tools/analysis_tools/demo_spread.py``): a config trained over seeds x thread
counts, each run in its own process, its record with every run, the mean and the range, read back by
a second run and refused for other settings; ``--check`` puts a test run beside the recorded range;
a detector that finds nothing scores 0."""
import json

from mmvisattn.analysis.demo_spread import (
    NO_DETECTIONS,
    final_metric,
    metric_of_test_run,
    newest_record,
)

from ..conftest import REPO, run_tool

TOOL = 'tools/analysis_tools/demo_spread.py'


def write_short_demo(folder):
    """The stock SegFormer demo (mIoU is scored whatever the model predicts) cut to two
    iterations."""
    config = folder / 'segformer_demo_2i.py'
    config.write_text(
        f"_base_ = '{REPO}/configs/demo/segformer_mit-b0_1xb8-600i_shapes-cityscapes-128.py'\n"
        'train_cfg = dict(max_iters=2, val_interval=2)\n'
        'default_hooks = dict(checkpoint=dict(interval=2))\n'
    )
    return config


def test_runs_over_seeds_and_threads_are_recorded_and_read_back(workspace, tmp_path):
    config = write_short_demo(tmp_path)
    out, records = tmp_path / 'spread', tmp_path / 'records'
    args = [TOOL, config, '--seeds', 0, '--threads', 1, 2, '--out-dir', out, '--record-dir',
            records]
    run_tool(args, cwd=workspace)
    record, = records.glob('*_segformer-demo-2i_demo_spread.json')
    results = json.loads(record.read_text())['results']
    assert [(run['seed'], run['threads'],
             run['metric']) for run in results['runs']] == [(0, 1, 'mIoU'), (0, 2, 'mIoU')]
    values = [run['value'] for run in results['runs']]
    assert (
        results['min'] == min(values)
        and results['max'] == max(values)
        and 0 < results['mean'] <= 100
    )
    for run in ('seed0-threads1', 'seed0-threads2'):
        assert (
            final_metric(out / run / 'work')[1]
            == json.loads((out / run / 'result.json').read_text())['value']
        )
    again = run_tool(args, cwd=workspace)  # read back: no training starts
    assert (
        len(list((out / 'seed0-threads1' / 'work').glob('2*'))) == 1 and '| 0 | 2 |' in again.stdout
    )
    (config.parent / 'other.py').write_text(config.read_text())
    refused = run_tool([TOOL, config.parent / 'other.py', '--seeds', 0, '--threads', 1, '--out-dir',
                        out],
                       cwd=workspace, check=False)
    assert refused.returncode == 1 and 'was written for other settings' in refused.stderr

    stamp = out / 'seed0-threads1' / 'test' / '20261207_000000'
    stamp.mkdir(parents=True)
    (stamp / '20261207_000000.json').write_text(json.dumps(dict(mIoU=results['max'] + 1)))
    checked = run_tool([TOOL, config, '--check', stamp.parent, '--record-dir', records],
                       cwd=workspace)
    assert (
        f'mIoU {results["max"] + 1:.3f}: OUTSIDE the range measured over 2 runs' in checked.stdout
    )
    (stamp / '20261207_000000.json').write_text(json.dumps(dict(mIoU=results['min'])))
    checked = run_tool([TOOL, config, '--check', stamp.parent, '--record-dir', records],
                       cwd=workspace)
    assert 'inside the range' in checked.stdout and record.name in checked.stdout


def test_a_detector_without_detections_scores_0_and_a_missing_metric_is_named(tmp_path):
    stamp = tmp_path / '20261207_000000'
    (stamp / 'vis_data').mkdir(parents=True)
    (stamp / 'vis_data' / 'scalars.json').write_text(json.dumps(dict(loss=1.0, step=2)) + '\n')
    (stamp / '20261207_000000.json').write_text('{}')
    (stamp / '20261207_000000.log').write_text(f'ERROR - {NO_DETECTIONS}.\n')
    assert final_metric(tmp_path) == ('coco/bbox_mAP', 0.0) == metric_of_test_run(tmp_path)
    (stamp / '20261207_000000.log').write_text('nothing scored\n')
    try:
        final_metric(tmp_path)
    except RuntimeError as error:
        assert 'no coco/bbox_mAP or mIoU or accuracy/top1 logged under' in str(error)
    else:
        raise AssertionError('a run without a metric was read as scored')


def test_the_newest_record_is_the_one_written_last_not_the_last_name(tmp_path):
    """Two records of one day differ by commit in their names: the check reads the one written
    later."""
    for commit, time in (('ffff', '06:00:00Z'), ('0000', '09:00:00Z')):
        name = f'2026-12-07_cpu_{commit}_demo-3000i_demo_spread.json'
        (tmp_path / name).write_text(json.dumps(dict(date='2026-12-07', time=time, results={})))
    assert (
        newest_record(tmp_path, 'configs/demo_3000i.py').name
        == '2026-12-07_cpu_0000_demo-3000i_demo_spread.json'
    )
