"""tools/analysis_tools/benchmark_deploy.py on PicoDet-S-Castling (the model mmdeploy used to export
with its training-only softmax branches, scoring 0.014 mAP for 0.122): trained briefly through the
project's ``tools/train.py``, exported by mmdeploy's own ``tools/deploy.py`` and tested by its
``tools/test.py`` on ONNX Runtime, it scores what the project's ``tools/test.py`` gives (both 0
where neither has a detection above the score threshold: the demo's seed decides the 40 iterations,
not what passes). mmdeploy's tools come from ``../shared/mmdeploy`` (a checkout of v1.3.1); where it
is missing the test skips with one line, and CI sets ``MMVISATTN_REQUIRE_MMDEPLOY_TOOLS=1``, under
which it fails instead."""
import json
import os

import pytest

from lab.deploy_benchmark import NO_DETECTIONS, metric_cell, metric_of, record_metric, tables

from ..conftest import REPO, run_tool

pytest.importorskip('mmdeploy', reason='mmdeploy is not installed (make install installs it)')

MMDEPLOY_DIR = REPO.parent / 'shared' / 'mmdeploy'
REQUIRED = 'MMVISATTN_REQUIRE_MMDEPLOY_TOOLS'


def test_mmdeploy_tools_give_the_project_metric(workspace, tmp_path):
    if not (MMDEPLOY_DIR / 'tools' / 'deploy.py').is_file():
        message = f'{MMDEPLOY_DIR} has no tools/deploy.py: mmdeploy\'s own tools are not run'
        if os.environ.get(REQUIRED) == '1':
            pytest.fail(f'{message} ({REQUIRED}=1)')
        pytest.skip(message)
    out = tmp_path / 'out'
    run_tool(['tools/analysis_tools/benchmark_deploy.py', '--mmdeploy-dir', MMDEPLOY_DIR, '--cases',
              'picodet-castling',
              '--latency', '--iters', '40', '--tools-dir', REPO / 'tools', '--configs-dir',
              REPO / 'configs', '--out-dir', out], cwd=workspace, timeout=900)
    record = json.loads((out / 'record_bench_deploy.json').read_text())
    row = record['results']['cases']['picodet-castling']
    assert 'error' not in row, row
    # the same metric both ways, whatever the 40 iterations reach: a run without detections scores
    # 0, and then the other must have none either
    assert row['onnxruntime'] == row['pytorch'], row
    assert set(row.get('no_detections', [])) in (set(), {'pytorch', 'onnxruntime'}), row
    assert row['parity'] < 1e-4, row
    cell = (f'| coco/bbox_mAP {metric_cell(row, "pytorch")} (40 iterations) | '
            f'{metric_cell(row, "onnxruntime")} |')
    assert cell in tables(record['results'])


def write_run(work_dir, stamp: str, metrics: dict, log: str = '') -> None:
    run = work_dir / stamp
    run.mkdir(parents=True)
    (run / f'{stamp}.json').write_text(json.dumps(dict(metrics, time=0.1)))
    (run / f'{stamp}.log').write_text(log)


def test_a_run_without_detections_scores_map_0(tmp_path):
    """mmdet's CocoMetric returns no metric where no detection passed the score threshold: that
    run's mAP is 0 (``None`` from :func:`metric_of`, recorded as 0 and listed); a metrics file that
    lacks the key for another reason is an error naming it."""
    write_run(tmp_path / 'none', '20261202_000000', {}, f'ERROR - {NO_DETECTIONS}.')
    write_run(tmp_path / 'some', '20261202_000000', {'coco/bbox_mAP': 0.25})
    write_run(tmp_path / 'broken', '20261202_000000', {}, 'no metric written')
    assert metric_of(tmp_path / 'none', 'coco/bbox_mAP') is None
    assert metric_of(tmp_path / 'some', 'coco/bbox_mAP') == 0.25
    with pytest.raises(RuntimeError, match='no coco/bbox_mAP in the metrics under .*broken'):
        metric_of(tmp_path / 'broken', 'coco/bbox_mAP')
    row = {}
    record_metric(row, 'pytorch', None)
    record_metric(row, 'onnxruntime', 0.25)
    assert row == dict(pytorch=0.0, onnxruntime=0.25, no_detections=['pytorch'])
    assert (
        metric_cell(row, 'pytorch') == '0.000 (no detections)'
        and metric_cell(row, 'onnxruntime') == '0.250'
    )
