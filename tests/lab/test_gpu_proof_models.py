"""gpu_proof_models.py: its CPU smoke (every family's shapes config through tools/train.py,
tools/test.py and --resume, a run under a memory cap as an out-of-memory row, a largest-input search
under a cap), its plan and budget, its record; without CUDA the GPU run fails in one line."""
import json
import sys
from importlib import import_module

import pytest

from ..conftest import REPO, run_command, run_tool, tool_env

TOOL = 'tools/analysis_tools/gpu_proof_models.py'
# the tests that share the module's fixture run on one worker: it runs once, no worker waits for it
pytestmark = pytest.mark.xdist_group('gpu_proof_models')


@pytest.fixture(scope='module')
def tool():
    return import_module('lab.proof.models')


def run_smoke(out):
    """The smoke as the suite runs its tools (its runs forked from the suite's tool server, as they
    are from a tool run forked from it: lab/tool_server.py)."""
    run_tool([TOOL, '--smoke', '--fresh', '--out-dir', out], cwd=out, timeout=600)


@pytest.fixture(scope='module')
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp('gpu_proof_models_smoke')
    run_smoke(out)
    return out, json.loads((out / 'models.json').read_text())


def test_every_family_trains_tests_and_resumes(tool, smoke):
    _, results = smoke
    rows = {row['family']: row for row in results['rows'].values() if row['stage'] == 'project'}
    assert sorted(rows) == sorted(tool.SMOKE_CONFIGS)
    for family, row in rows.items():
        assert row['ok'] and row['error'] is None, (family, row)
        assert row['checks'] == dict(finite_losses=True, dispatch_as_named=True,
                                     backbone_sync_free=True,
                                     resumes_at_checkpoint=True), (family, row['checks'])
        assert (row['first_iter'], row['last_iter']) == (0, 6)
        assert (row['resume_first_iter'], row['resume_last_iter']) == (6, 8)
        assert len(row['losses']) == 6 and row['step_ms'] > 0 and row['peak_mb'] > 0
        assert row['test_images'] == 2 and row['test_images_s'] > 0, (family, row)
        # segmentors score every pixel; a detector 6 iterations old may predict no box above its
        # threshold, which CocoMetric reports as empty results
        assert (
            'mIoU' in row['metrics']
            if 'cityscapes' in row['config']
            else row['metrics'] is not None
        )
        assert row['dispatch'], family  # every family's shapes model has attention layers
        assert set(row['host_reads']) == {'total', 'by_op', 'by_line'}


def test_a_run_past_its_memory_is_a_row(smoke):
    _, results = smoke
    capped = [row for row in results['rows'].values() if row['stage'] == 'oom']
    assert len(capped) == 1 and capped[0]['out_of_memory'] and capped[0]['error'] == 'out of memory'


def test_the_record_has_one_row_per_model(smoke):
    out, _ = smoke
    record = json.loads((out / 'record_models.json').read_text())
    assert (
        record['kind'] == 'models'
        and record['gpu'] == 'CPU'
        and record['name'].endswith('_models.json')
    )
    assert {'mmcv', 'mmdet', 'mmseg', 'mmengine', 'torch'} <= set(record['software'])
    assert len(record['rows']) == 7 and all(row['step_ms'] for row in record['rows'][:6])
    assert (out / 'models.md').read_text().startswith('# Whole models on CPU')


def test_largest_input_under_a_cap(smoke):
    _, results = smoke
    (row,) = [row for row in results['rows'].values() if row['stage'] == 'largest']
    assert row['ok'] and row['largest_input'] and not row['saturated'], row
    tried = {int(side): fits for side, fits in row['tried'].items()}
    assert tried[row['largest_input']] and not all(tried.values())
    assert all(fits == (side <= row['largest_input']) for side, fits in tried.items())


@pytest.mark.parametrize('message', ['could not create a primitive',
                                     "DefaultCPUAllocator: can't allocate memory",
                                     'std::bad_alloc'])
def test_a_capped_cpu_refusal_does_not_fit(message, monkeypatch):
    """oneDNN names a buffer the capped address space refused only as a failed primitive (some CPUs'
    convolutions, not others'): under a cap that is running out of memory, without one an error."""
    import torch

    from lab.bench import largest_input, model_pairs

    def refused(*args, **kwargs):
        raise RuntimeError(message)
    monkeypatch.setattr(model_pairs, 'TrainingStep', refused)
    model = torch.nn.Linear(2, 2)
    assert not largest_input.fits(model, 64, 'cpu', capped=True)
    if 'primitive' in message:
        with pytest.raises(RuntimeError, match='primitive'):
            largest_input.fits(model, 64, 'cpu')
    else:
        assert not largest_input.fits(model, 64, 'cpu')


def test_plan_proves_one_model_of_each_family_first(tool):
    jobs = tool.plan(tool.parse_args([]))
    first = [job for job in jobs if job['stage'] == 'project']
    assert sorted(job['family'] for job in first) == sorted(tool.FAMILIES) and not any(
        j['stock'] for j in first
    )
    assert [job['stage'] for job in jobs] == sorted((job['stage'] for job in jobs),
                                                    key=tool.STAGES.index)
    # the deploy pair's for the largest input
    assert {job['pair'] for job in jobs} == set(tool.PAIRS)
    assert not any(job['stock'] and job['deploy'] for job in jobs)


def test_budget_skips_and_says_so(tool, tmp_path, monkeypatch):
    args = tool.parse_args(['--smoke', '--budget', '0', '--out-dir', str(tmp_path)])
    monkeypatch.setattr(tool, 'layout_roots', lambda jobs, args: {})
    monkeypatch.setattr(tool, 'parse_args', lambda argv=None: args)
    assert tool.main() == 0
    rows = json.loads((tmp_path / 'models.json').read_text())['rows']
    assert all(row['skipped'] == 'out of time (--budget 0 s)' for row in rows.values())
    assert 'Skipped (out of --budget)' in (tmp_path / 'models.md').read_text()


def test_without_cuda_is_one_line(tmp_path):
    done = run_command([sys.executable, str(REPO / TOOL), '--out-dir', str(tmp_path)],
                       env=tool_env())
    assert done.returncode == 1 and done.stderr.strip().startswith('error: no CUDA device')
    assert len(done.stderr.strip().splitlines()) == 1


def test_profiled_syncs_are_attributed_to_our_innermost_frame():
    """The runtime's waits are counted; each operator that reads the device from the host goes to
    the innermost frame of the project or OpenMMLab on its stack (a real CPU profile, and recorded
    events)."""
    from types import SimpleNamespace as Event

    import torch
    from torch.profiler import ProfilerActivity, profile
    probe = import_module('lab.proof.model_probe')
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as profiled:
        values = torch.arange(6.)
        values.sum().item(), torch.nonzero(values), values.mul(2)
    counted = probe.profiled_syncs(profiled)
    assert counted['runtime'] == 0 and counted['host_reads'] == 2
    assert set(counted['by_line']) == {
        f'aten::{op} (no frame of ours)' for op in ('_local_scalar_dense', 'nonzero')
    }
    events = [
        Event(
            name='aten::_local_scalar_dense',
            stack=[
                '/x/torch/_tensor.py(1): item',
                '/x/mmdet/models/losses/a.py(7): f',
                '/x/mmengine/model/wrappers.py(10): train_step',
            ],
        ),
        Event(name='cudaStreamSynchronize', stack=[]),
        Event(name='cudaLaunchKernel', stack=[]),
    ]
    assert probe.profiled_syncs(Event(events=lambda: events)) == dict(
        runtime=1, host_reads=1, by_line={'/x/mmdet/models/losses/a.py(7): f': 1})
