"""gpu_proof.py: the CPU smoke run of every section passes inside `make test` (so the proof cannot
rot between GPU sessions), on a Python where OpenMMLab cannot be imported, as on the bare GPU
machine; the op tests collect there too; a machine without CUDA or with a Triton too old fails in
one line."""
import json
import sys
import textwrap
from importlib import import_module

import pytest

from ..conftest import REPO, run_command, tool_env

TOOL = 'tools/analysis_tools/gpu_proof.py'
OPENMMLAB = ('mmengine', 'mmcv', 'mmdet', 'mmseg')


@pytest.fixture(scope='module')
def without_openmmlab(tmp_path_factory) -> dict:
    """The environment of a Python on which mmengine, mmcv, mmdet and mmseg are not found (a
    ``sitecustomize`` hiding them from the path finder), as on the lent GPU machine."""
    folder = tmp_path_factory.mktemp('no_openmmlab')
    (folder / 'sitecustomize.py').write_text(textwrap.dedent(f'''\
        import importlib.machinery
        _find_spec = importlib.machinery.PathFinder.find_spec.__func__

        def find_spec(cls, name, path=None, target=None):
            if name.partition('.')[0] in {OPENMMLAB!r}:
                return None
            return _find_spec(cls, name, path, target)

        importlib.machinery.PathFinder.find_spec = classmethod(find_spec)
    '''))
    return dict(tool_env(), PYTHONPATH=f'{folder}:{REPO}')


def test_openmmlab_is_hidden(without_openmmlab):
    done = run_command([sys.executable, '-c', 'import mmvisattn, importlib.util; '
                        'print(importlib.util.find_spec("mmengine"), mmvisattn.__all__)'],
                       env=without_openmmlab)
    assert done.returncode == 0 and done.stdout.strip() == "None ['__version__']", done.stderr


def test_cpu_smoke_passes_every_section_without_openmmlab(without_openmmlab, tmp_path):
    done = run_command([sys.executable, str(REPO / TOOL), '--cpu-smoke', '--out-dir',
                        str(tmp_path)],
                       cwd=tmp_path, env=without_openmmlab)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / 'gpu_proof.json').read_text())
    tool, cases = import_module('lab.proof.ops'), import_module('lab.proof.cases')
    assert list(report['sections']) == list(tool.SECTIONS) and report['meta']['failures'] == []
    checked = {(row['op'], row['impl'],
                row['dtype']) for row in report['sections']['correctness']['rows']}
    for op in ('sliding_chunk_attention', 'ripple_attention', 'linear_angular_attention',
               'peripheral_attention', 'position_logits'):
        assert {(op, 'triton', dtype) for dtype in tool.DTYPES} <= checked
    assert {('masked_softmax_attention', 'torch', dtype) for dtype in tool.DTYPES} <= checked
    assert all(row['host_syncs'] == 'none' for row in report['sections']['syncs']['rows'])
    benchmarks = report['sections']['benchmarks']['rows']
    baselines = [row for row in benchmarks if row['impl'] == 'SDPA (flash)']
    # the smoke times each op's first layer
    layered = [case for case in cases.CASES if case.shipped]
    assert len(baselines) == len(layered) and all('forward_backward_ms' in row for row in baselines)
    layers = {(row['op'], row['layer']) for row in benchmarks}
    # every implementation that runs on CUDA, auto's choice and the fastest marked
    for op, layer in layers:
        rows = [row for row in benchmarks if (row['op'], row['layer']) == (op, layer)]
        case = next(case for case in cases.CASES if case.op.name == op)
        assert {row['impl'] for row in rows} == {*case.impls,
                                                 tool.SDPA_ROW} - set(cases.CUDA_TRAINING_ONLY)
        assert sum(row['auto'] for row in rows) == 1 and sum(row['fastest'] for row in rows) == 1
        assert sum(row['fastest_impl'] for row in rows) == 1 and not any(
            row['fastest_impl'] for row in rows if row['impl'] == tool.SDPA_ROW)
        fastest = next(row for row in rows if row['fastest'])
        assert fastest['forward_backward_ms'] == min(row['forward_backward_ms'] for row in rows)
    # each experimental dense form beside auto's choice
    swept = report['sections']['crossovers']['rows']
    assert {(row['op'], row['tokens'], row['dense']) for row in swept} == {
        (op, tokens,
         dense) for op in ('ripple_attention', 'linear_angular_attention') for tokens in (9, 16)
        for dense in (True, False)}
    assert {row['impl'] for row in swept if row['dense']} == {'fused', 'dense'}
    assert all('forward_backward_ms' in row for row in swept)
    assert len(json.loads((tmp_path / 'record_proof.json').read_text())['crossovers']) == len(swept)
    assert (tmp_path / 'gpu_proof.md').read_text().startswith('# GPU proof: CPU')


def test_op_tests_collect_without_openmmlab(without_openmmlab):
    done = run_command([sys.executable, '-m', 'pytest', 'tests/test_ops', '--collect-only', '-q',
                        '-p', 'no:cacheprovider'], cwd=REPO, env=without_openmmlab)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert 'tests collected' in done.stdout


def test_no_cuda_is_one_line(tmp_path):
    done = run_command([sys.executable, str(REPO / TOOL), '--out-dir', str(tmp_path)], cwd=tmp_path,
                       env=tool_env())
    assert done.returncode == 1
    assert done.stderr.strip().startswith('error: no CUDA device (torch.cuda.is_available() is '
                                          'False; torch ')
    assert '\n' not in done.stderr.strip() and not any(tmp_path.iterdir())


@pytest.mark.parametrize('found,have', [(None, 'none is installed'), ((2, 3), '2.3 is installed')])
def test_missing_or_old_triton_is_one_line(machine, found, have):
    tool = import_module('lab.proof.ops')
    machine(triton=found)
    with pytest.raises(SystemExit,
                       match=rf'^error: the Triton kernels: needs triton >= 3.0; {have}$'):
        tool.preflight(cpu_smoke=True)


def test_what_the_budget_leaves_is_reported_as_skipped(tmp_path):
    done = run_command([sys.executable, str(REPO / TOOL), '--cpu-smoke', '--budget', '0',
                        '--sections', 'random_states',
                        '--out-dir', str(tmp_path)], cwd=tmp_path, env=tool_env())
    assert done.returncode == 0, done.stderr
    section = json.loads((tmp_path / 'gpu_proof.json').read_text())['sections']['random_states']
    assert section == dict(skipped='out of time (--budget 0 s)', rows=[])
    assert (
        '## random_states (skipped: out of time (--budget 0 s))'
        in (tmp_path / 'gpu_proof.md').read_text()
    )
