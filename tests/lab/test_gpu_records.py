"""gpu_records.py: records of GPU runs in one schema per kind, and the GPU tables generated from the
newest record of each GPU (printed by the tool, rendered on docs/records/gpu.md by the docs build,
which tests/test_docs.py runs; no page holds them as text)."""
import json
import sys

import pytest

from lab import records

from ..conftest import REPO, run_command, tool_env

TOOL = 'tools/analysis_tools/gpu_records.py'


def model_row(model: str, step_ms: float, stock: bool = False) -> dict:
    return dict(model=model, stock=stock, step_ms=step_ms, peak_mb=100.0, test_images_s=5.0,
                largest_input=1024)


def test_the_tool_prints_the_tables_the_docs_render():
    done = run_command([sys.executable, str(REPO / TOOL)], env=tool_env())
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout == records.tables(REPO / 'docs' / 'records' / 'gpu')
        and '## Whole models' in done.stdout
    )
    page = (REPO / 'docs' / 'records' / 'gpu.md').read_text()
    assert '<!-- records: gpu -->' in page and '|' not in page


def test_a_record_carries_its_provenance():
    data = records.record('models', 'NVIDIA H100 80GB HBM3', [model_row('a', 1.0)], openmmlab=True)
    assert data['name'].startswith(data['date']) and data['name'].endswith(
        f'_{data["commit"]}_models.json'
    )
    assert '_NVIDIA-H100-80GB-HBM3_' in data['name'] and isinstance(data['dirty'], bool)
    software = {'mmvisattn', 'torch', 'cuda', 'python', 'triton', 'mmcv', 'mmengine', 'mmdet',
                'mmseg'}
    assert software == set(data['software'])
    with pytest.raises(ValueError, match='lack largest_input'):
        row = model_row('a', 1.0)
        del row['largest_input']
        records.record('models', 'GPU', [row], openmmlab=False)


def test_proof_rows_take_the_benchmarks():
    sections = dict(benchmarks=dict(rows=[
        dict(op='ripple_attention', layer='L', size='s', impl='triton', auto=True, forward_ms=1.0,
             forward_backward_ms=3.0, peak_mb=10.0, fastest=False),
        dict(op='ripple_attention', layer='L', size='s', impl='SDPA (flash)', auto=False,
             forward_ms=0.1, forward_backward_ms=0.4, peak_mb=5.0, fastest=True),
        dict(op='ripple_attention', layer='M', size='s', skipped='out of time')]))
    rows = records.proof_rows(sections, 'SDPA (flash)')
    assert [(row['impl'], row['auto']) for row in rows] == [('triton', True), ('sdpa', False)]
    assert all(set(records.PROOF_FIELDS) <= set(row) for row in rows)


def test_tables_take_the_newest_record_of_each_gpu(tmp_path):
    for day, gpu, step in (('2026-11-01', 'H100', 9.0), ('2026-11-20', 'H100', 2.0),
                           ('2026-11-10', 'H200', 3.0)):
        data = dict(kind='models', gpu=gpu, date=day, commit='abc', dirty=False,
                    software=dict(torch='2.11'), rows=[model_row(f'model-{gpu}', step)])
        (tmp_path / f'{day}_{gpu}_abc_models.json').write_text(json.dumps(data))
    text = records.tables(tmp_path)
    assert ('| model-H100 |  | 2.0 |' in text and '9.0' not in text
            and '| model-H200 |  | 3.0 |' in text)
    # no proof record
    assert text.index('**H100**') < text.index('**H200**') and 'No record yet.' in text


def test_a_copy_says_what_it_is_a_copy_of(monkeypatch):
    """A lent machine's copy may carry another checkout's .git: the environment's commit wins."""
    monkeypatch.setenv('MMVISATTN_COMMIT', '0123456789ab')
    monkeypatch.setenv('MMVISATTN_DIRTY', '0')
    data = records.record('proof', 'GPU', [], openmmlab=False)
    assert (data['commit'], data['dirty']) == ('0123456789ab', False)
    assert data['name'].endswith('_GPU_0123456789ab_proof.json')


def test_invalid_fields_and_notes_are_shown(tmp_path):
    data = dict(kind='models', gpu='H100', date='2026-11-27', commit='abc', dirty=False,
                software=dict(torch='2.11'),
                rows=[model_row('m', 5.0)], invalid=['peak_mb'], notes=['peak read after a reset'])
    (tmp_path / '2026-11-27_H100_abc_models.json').write_text(json.dumps(data))
    text = records.tables(tmp_path)
    assert '| m |  | 5.0 | - | 5.0 | 1024 |' in text and '- peak read after a reset' in text


def proof_record(path, gpu: str, day: str, times: dict) -> None:
    """A proof record of one layer: ``times`` ``{impl: forward + backward ms}``."""
    rows = [dict(op='ripple_attention', layer='L', impl=impl, auto=impl == 'triton',
                 forward_ms=time / 3,
                 forward_backward_ms=time, peak_mb=1.0) for impl, time in times.items()]
    data = dict(kind='proof', gpu=gpu, date=day, commit='abc', dirty=False,
                software=dict(torch='2.11'), rows=rows)
    (path / f'{day}_{gpu}_abc_proof.json').write_text(json.dumps(data))


def sweep(times: dict) -> list:
    """Crossover rows of one op: ``{tokens: (fused ms, triton ms)}`` (its dense form first)."""
    return [dict(op='ripple_attention', tokens=tokens, impl=impl, dense=impl == 'fused',
                 forward_backward_ms=ms)
            for tokens, pair in times.items() for impl, ms in zip(('fused', 'triton'), pair)]


def test_the_crossover_is_the_last_size_where_dense_was_faster_at_every_size():
    assert records.measured_crossovers(sweep({256: (1, 2), 576: (2, 3), 1024: (4, 3),
                                              2304: (5, 9)})) == {
        'ripple_attention': 576}
    assert records.measured_crossovers(sweep({256: (3, 2)})) == {'ripple_attention': 0}


def test_goals_judge_the_fastest_implementations_against_sdpa():
    """Each goal takes the implementation measured fastest in forward + backward at its layers, sums
    them where a goal spans two ops, and divides by the first layer's SDPA row; a goal without the
    rows it needs is not judged. The goals name layers the proof times."""
    from lab.proof.cases import CASES
    assert {layer for goal in records.GOALS for layer in goal.layers} <= {
        (case.op.name, layer) for case in CASES for layer in case.shipped}
    castling, aux = 'Castling ViT-B at 512x512', 'Castling ViT-B auxiliary branch at 512x512'
    pervit = 'PerViT-T stage 3 at 800x1344'

    def row(op, layer, impl, forward, both, peak=10.0):
        return dict(op=op, layer=layer, impl=impl, auto=False, forward_ms=forward,
                    forward_backward_ms=both, peak_mb=peak)
    data = dict(rows=[row('linear_angular_attention', castling, 'triton', 0.2, 1.0),
                      row('linear_angular_attention', castling, 'dense', 0.1, 0.5),
                      row('linear_angular_attention', castling, 'sdpa', 0.1, 0.4),
                      row('masked_softmax_attention', aux, 'triton', 0.2, 0.6),
                      row('peripheral_attention', pervit, 'torch', 0.5, 2.5, peak=419.0),
                      row('peripheral_attention', pervit, 'sdpa', 0.2, 0.5, peak=30.0)])
    goals = {row['goal']: row for row in records.goal_rows(data)}
    deploy = goals['Castling 32x32, deploy: forward no slower than SDPA']
    assert deploy['impls'] == ['dense'] and deploy['ratio'] == pytest.approx(1.0) and deploy['met']
    assert goals['Castling 32x32: within 2x of SDPA']['ratio'] == pytest.approx(1.25)
    assert goals['PerViT-T 50x84: within 1.3x of SDPA']['met'] is False
    assert goals["PerViT-T 50x84: peak memory at most 2x SDPA's"]['ratio'] == pytest.approx(
        419 / 30
    )
    training = goals['Castling 32x32, training form (both branches): within 3x of SDPA']
    assert (
        training['impls'] == ['dense', 'triton']
        and training['ratio'] == pytest.approx(2.75)
        and training['met']
    )
    vil = goals['ViL-S stage 1: 30x faster than SDPA']
    assert vil['impls'] == [None] and vil['ratio'] is None and vil['met'] is None
    text = '\n'.join(records.goals_table(data))
    assert ('| Castling 32x32, training form (both branches): within 3x of SDPA | dense + triton | '
            '2.750 | 3 | yes |'
            in text)
