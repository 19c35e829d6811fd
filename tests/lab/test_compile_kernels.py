"""Ahead-of-time compilation of every Triton kernel for a real GPU architecture, on this CPU
machine: the kernels are discovered in the package, the launches recorded from a model, and each is
compiled to a cubin for sm_90 with its shared memory, registers and spills checked."""
import json
import re
from importlib import import_module

import pytest

from lab.proof.compile_kernels import main, unsupported_triton

from ..conftest import REPO, run_tool

TOOL = 'tools/analysis_tools/compile_kernels.py'
LAUNCH_PATH_MISSING = unsupported_triton()
needs_launch_path = pytest.mark.skipif(LAUNCH_PATH_MISSING is not None,
                                       reason=str(LAUNCH_PATH_MISSING))


def jit_functions_in_source() -> int:
    return sum(len(re.findall(r'^@triton\.jit', path.read_text(), re.M))
               for path in (REPO / 'mmvisattn' / 'ops').rglob('*.py'))




def test_a_triton_without_the_recorded_launch_path_is_refused_in_one_line(monkeypatch, tmp_path):
    from triton.runtime.jit import JITFunction
    monkeypatch.delattr(JITFunction, '_pack_args', raising=False)
    monkeypatch.delenv('TRITON_INTERPRET', raising=False)
    with pytest.raises(SystemExit,
                       match=r'^error: Triton \S+ launches kernels without triton.knobs and '
                                         r'JITFunction._pack_args, the launch path this tool '
                                         r'records'):
        main(['--out-dir', str(tmp_path)])
    assert not any(tmp_path.iterdir())


@needs_launch_path
def test_every_kernel_compiles_for_sm90_without_spills(tmp_path):
    # one config suffices for coverage: every attention type with a Triton implementation is also
    # recorded at the widest head its op accepts
    done = run_tool([TOOL, '--arch', 'sm_90', '--dtypes', 'float16', '--configs',
                     REPO / 'configs/vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py',
                     '--out-dir', tmp_path], cwd=tmp_path)
    report = json.loads((tmp_path / 'kernels.json').read_text())
    summary, rows = report['summary'], report['rows']
    assert summary['kernels_found'] == jit_functions_in_source() >= 15
    assert (
        summary['kernels_unreached'] == [] and summary['failed'] == 0 and summary['spilling'] == 0
    )
    launched = {row['kernel'].replace('mmvisattn.ops.', '') for row in rows}
    assert {'sliding_chunk.triton._grad_bias', 'ripple.triton._backward_keys',
            'linear_angular.triton._summarise',
            'peripheral.position_triton._window_grad'} <= launched
    # float scalars typed fp64, as torch.compile passes them: a kernel that lets them promote a
    # block failed there
    assert {
        row['kernel'].replace('mmvisattn.ops.', '')
        for row in rows
        if row['source'] == 'torch.compile'
    } == {
        'linear_angular.triton._summarise',
        'linear_angular.triton._mix',
        'ripple.triton._ring_weights_forward',
        'ripple.triton._ring_weights_backward',
        'peripheral.position_triton._window_stats',
        'peripheral.position_triton._logits_forward',
        *(
            f'sliding_chunk.triton.{kernel}'
            for kernel in ('_forward', '_grad_queries', '_grad_keys', '_grad_bias')
        ),
    }
    for row in rows:
        assert row['arch'] == 'sm_90' and row['problems'] == []
        assert 0 < row['registers'] <= 255 and row['spill_bytes'] == 0
        assert row['shared_bytes'] <= 232448
    # half inputs reach the kernels that take them (ripple's local/global split upcasts to float32
    # first, by design), and every product of theirs takes half operands: the tensor cores'
    # half-precision rate, not TF32
    assert any('*fp16' in row['signature'].values() for row in rows
               if row['kernel'].endswith('sliding_chunk.triton._forward'))
    with_dots = {row['kernel'].replace('mmvisattn.ops.', ''): row['dot_operands']
                 for row in rows if row['dot_operands']}
    assert set(with_dots) == {'sliding_chunk.triton._forward', 'sliding_chunk.triton._grad_queries',
                              'sliding_chunk.triton._grad_keys', 'sliding_chunk.triton._grad_bias',
                              'linear_angular.triton._summarise', 'linear_angular.triton._mix',
                              'peripheral.position_triton._logits_forward',
                              'peripheral.position_triton._logits_backward',
                              'peripheral.position_triton._window_grad_sums',
                              'peripheral.position_triton._window_grad'}
    for row in rows:
        if row['dot_operands'] and row['dtype'] == 'float16':
            assert row['dot_operands'] == ['f16'], row['kernel']
    assert 'linear_angular.triton._summarise' in done.stdout and 'sm_90' in done.stdout


def test_problems_name_spills_shared_memory_and_errors():
    tool = import_module('lab.proof.compile_kernels')
    row = dict(arch='sm_80', shared_bytes=200000, registers=255, spill_bytes=24)
    assert tool.problems(row) == ['shared memory 200000 B > 166912 B',
                                  '24 bytes of register spills']
    assert tool.problems(dict(row, shared_bytes=1024, spill_bytes=0)) == []
    assert tool.problems(dict(arch='sm_90',
                              error='CompilationError: at 3:4')) == ['CompilationError: at 3:4']
    rows = [dict(kernel='a.k', called=['a.helper'])]
    assert tool.unreached({'a.k': 0, 'a.helper': 0, 'a.orphan': 0}, rows) == ['a.orphan']


def test_unknown_arch_and_dtype_are_one_line(tmp_path):
    done = run_tool([TOOL, '--arch', 'sm_99', '--out-dir', tmp_path], cwd=tmp_path, check=False)
    assert done.returncode == 2
    assert 'unknown --arch sm_99; known: sm_75 sm_80 sm_86 sm_87 sm_89 sm_90' in done.stderr
    assert 'Traceback' not in done.stderr
    done = run_tool([TOOL, '--dtypes', 'float64', '--out-dir', tmp_path], cwd=tmp_path, check=False)
    assert (done.returncode == 2
            and 'unknown --dtypes float64; known: float32 float16 bfloat16' in done.stderr)


@needs_launch_path
def test_a_file_that_builds_no_model_is_one_line(tmp_path):
    not_a_config = tmp_path / 'notes.py'
    not_a_config.write_text('x = 1\n')
    done = run_tool([TOOL, '--configs', not_a_config, '--out-dir', tmp_path], cwd=tmp_path,
                    check=False)
    assert (done.returncode == 1
            and f'error: cannot build the model of {not_a_config}' in done.stderr)
    assert 'Traceback' not in done.stderr
    assert not (tmp_path / 'kernels.json').exists()
