"""python -m mmvisattn.ops.check: every backend of every op that runs on the device against its
reference, a line each; a backend that cannot run there named with the reason, a wrong one failing
the run."""
import pytest
import torch

from mmvisattn.ops import check, rwgk


def test_every_backend_on_cpu_is_checked_and_the_kernels_named(capsys, machine):
    machine(interpreted=False)  # a user's CPU: no interpreter
    assert check.main(['--device', 'cpu', '--dtypes', 'float32']) == 0
    lines = capsys.readouterr().out.splitlines()
    backends = [(case.op.name, impl) for case in check.CASES for impl in case.op.backends]
    assert len(lines) == len(backends) + 1
    for (op, impl), line in zip(backends, lines):
        assert line.startswith(f'{op} {impl} float32: ')
        if impl == 'triton':
            assert line.endswith(f"not run ({op}(impl='triton'): Triton kernels for CUDA tensors; "
                                 "these are on cpu)")
        else:
            assert ': ok, error ' in line
    assert lines[-1] == f'{len(backends)} of {len(backends)} ok or not run on cpu; 0 failed'


def test_a_wrong_backend_fails_the_check(capsys, monkeypatch):
    right = rwgk.OP.backends['torch'].function
    monkeypatch.setitem(rwgk.OP.backends, 'torch', rwgk.OP.backends['torch']._replace(
        function=lambda *args: right(*args) * 1.01))
    assert check.main(['--device', 'cpu', '--dtypes', 'float32', '--ops', 'rwgk_attention']) == 1
    out = capsys.readouterr().out
    assert (
        'rwgk_attention torch float32: FAILED, error 1.0e-02 (' in out
        and out.count('against 5e-03') == 1
    )
    assert out.splitlines()[-1] == '0 of 1 ok or not run on cpu; 1 failed'


@pytest.mark.parametrize('case', check.CASES, ids=[case.op.name for case in check.CASES])
def test_the_inputs_take_every_dtype(case):
    for dtype in (torch.float32, torch.bfloat16):
        leaves = check.leaves(case, case.test, 'cpu', dtype)
        assert all(t.dtype == dtype and t.requires_grad for t in leaves if t.is_floating_point())
