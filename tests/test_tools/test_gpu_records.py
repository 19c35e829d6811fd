"""gpu_records.py: records of GPU runs in one schema per kind, and the GPU tables generated from the
newest record of each GPU (printed by the tool, rendered on docs/records/gpu.md by the docs build,
which tests/test_docs.py runs; no page holds them as text)."""
import json
import sys
from importlib import import_module

import pytest

from ..conftest import REPO, run_command, tool_env

TOOL = 'tools/analysis_tools/gpu_records.py'


@pytest.fixture(scope='module')
def tool():
    return import_module('mmvisattn.proof.records')


def model_row(model: str, step_ms: float, stock: bool = False) -> dict:
    return dict(model=model, stock=stock, step_ms=step_ms, peak_mb=100.0, test_images_s=5.0, largest_input=1024)


def test_the_tool_prints_the_tables_the_docs_render(tool):
    done = run_command([sys.executable, str(REPO / TOOL)], env=tool_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout == tool.tables(REPO / 'docs' / 'records' / 'gpu') and '## Whole models' in done.stdout
    page = (REPO / 'docs' / 'records' / 'gpu.md').read_text()
    assert '<!-- records: gpu -->' in page and '|' not in page


def test_a_record_carries_its_provenance(tool):
    data = tool.record('models', 'NVIDIA H100 80GB HBM3', [model_row('a', 1.0)], openmmlab=True)
    assert data['name'].startswith(data['date']) and data['name'].endswith(f'_{data["commit"]}_models.json')
    assert '_NVIDIA-H100-80GB-HBM3_' in data['name'] and isinstance(data['dirty'], bool)
    assert {'torch', 'cuda', 'python', 'triton', 'mmcv', 'mmengine', 'mmdet', 'mmseg'} == set(data['software'])
    with pytest.raises(ValueError, match='lack largest_input'):
        row = model_row('a', 1.0)
        del row['largest_input']
        tool.record('models', 'GPU', [row], openmmlab=False)


def test_proof_rows_take_the_benchmarks(tool):
    sections = dict(benchmarks=dict(rows=[
        dict(op='ripple_attention', layer='L', size='s', impl='triton', auto=True, forward_ms=1.0,
             forward_backward_ms=3.0, peak_mb=10.0, fastest=False),
        dict(op='ripple_attention', layer='L', size='s', impl='SDPA (flash)', auto=False, forward_ms=0.1,
             forward_backward_ms=0.4, peak_mb=5.0, fastest=True),
        dict(op='ripple_attention', layer='M', size='s', skipped='out of time')]))
    rows = tool.proof_rows(sections, 'SDPA (flash)')
    assert [(row['impl'], row['auto']) for row in rows] == [('triton', True), ('sdpa', False)]
    assert all(set(tool.PROOF_FIELDS) <= set(row) for row in rows)


def test_tables_take_the_newest_record_of_each_gpu(tool, tmp_path):
    for day, gpu, step in (('2026-11-01', 'H100', 9.0), ('2026-11-20', 'H100', 2.0), ('2026-11-10', 'H200', 3.0)):
        data = dict(kind='models', gpu=gpu, date=day, commit='abc', dirty=False, software=dict(torch='2.11'),
                    rows=[model_row(f'model-{gpu}', step)])
        (tmp_path / f'{day}_{gpu}_abc_models.json').write_text(json.dumps(data))
    text = tool.tables(tmp_path)
    assert '| model-H100 |  | 2.0 |' in text and '9.0' not in text and '| model-H200 |  | 3.0 |' in text
    assert text.index('**H100**') < text.index('**H200**') and 'No record yet.' in text  # no proof record


def test_a_copy_says_what_it_is_a_copy_of(tool, monkeypatch):
    """A lent machine's copy may carry another checkout's .git: the environment's commit wins."""
    monkeypatch.setenv('MMVISATTN_COMMIT', '0123456789ab')
    monkeypatch.setenv('MMVISATTN_DIRTY', '0')
    data = tool.record('proof', 'GPU', [], openmmlab=False)
    assert (data['commit'], data['dirty']) == ('0123456789ab', False)
    assert data['name'].endswith('_GPU_0123456789ab_proof.json')


def test_invalid_fields_and_notes_are_shown(tool, tmp_path):
    data = dict(kind='models', gpu='H100', date='2026-11-27', commit='abc', dirty=False, software=dict(torch='2.11'),
                rows=[model_row('m', 5.0)], invalid=['peak_mb'], notes=['peak read after a reset'])
    (tmp_path / '2026-11-27_H100_abc_models.json').write_text(json.dumps(data))
    text = tool.tables(tmp_path)
    assert '| m |  | 5.0 | - | 5.0 | 1024 |' in text and '- peak read after a reset' in text
