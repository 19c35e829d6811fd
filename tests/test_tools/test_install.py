"""`make install` fails at once, in one line, when the toolchain it needs is missing."""
import os
import re
import shutil
import sys

from ..conftest import REPO, load_tool, run_command


def run_install(env):
    return run_command([shutil.which('bash'), str(REPO / 'tools/install.sh')], timeout=60, env=env)


def test_missing_python_is_named():
    done = run_install({**os.environ, 'PYTHON': 'python-does-not-exist'})
    assert done.returncode == 1
    assert done.stderr.strip() == ("make install: error: 'python-does-not-exist' not found on PATH "
                                   "(Python 3.11 is required; set PYTHON=...)")


def test_missing_compiler_is_named(tmp_path):
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    for tool in ('dirname', 'date'):
        os.symlink(shutil.which(tool), bin_dir / tool)
    os.symlink(sys.executable, bin_dir / 'python3.11')
    done = run_install({'PATH': str(bin_dir), 'HOME': str(tmp_path)})
    assert done.returncode == 1
    assert done.stderr.strip() == ("make install: error: no C++ compiler on PATH (install g++); "
                                   "mmcv's ops must be compiled")


def test_mmcv_without_cuda_kernels_is_named_in_one_line(monkeypatch, capsys):
    """Where CUDA is available the installed mmcv must run its ops on CUDA tensors; a CPU-only wheel
    (what a cache keyed without the CUDA version handed a GPU machine) fails here, naming the wheel,
    the device and the op, not at the first CUDA op of training."""
    tool = load_tool('tools/misc/check_mmcv_ops.py')

    def cpu_only_nms(device):
        raise RuntimeError('nms_impl: implementation for device cuda:0 not found.\n(more lines)')

    monkeypatch.setattr(tool, 'machine_devices', lambda: ['cpu', 'cuda'])
    monkeypatch.setitem(tool.CHECKS, 'cuda', [cpu_only_nms])
    assert tool.main(['--wheel', '/cache/mmcv-2.1.0-cp311-cp311-linux_x86_64.whl']) == 1
    assert capsys.readouterr().err == (
        'make install: error: mmcv (/cache/mmcv-2.1.0-cp311-cp311-linux_x86_64.whl) has no working '
        'cuda kernels '
        '(cpu_only_nms: RuntimeError: nms_impl: implementation for device cuda:0 not found.); '
        'delete the wheel and run make install again with the CUDA toolkit (nvcc) on PATH\n')


def test_installed_mmcv_runs_its_ops_on_this_machine():
    tool = load_tool('tools/misc/check_mmcv_ops.py')
    assert all(tool.failure(device) is None for device in tool.machine_devices())


def cache_dir(tmp_path, torch_version: str, cuda, **env) -> str:
    """install.sh's ``mmcv_cache_dir`` for a venv whose torch says ``torch_version`` and
    ``cuda``."""
    fake = tmp_path / 'fake' / 'torch'
    fake.mkdir(parents=True, exist_ok=True)
    (fake / '__init__.py').write_text(f'__version__ = {torch_version!r}\n'
                                      f'class version:\n    cuda = {cuda!r}\n')
    (tmp_path / 'venv' / 'bin').mkdir(parents=True, exist_ok=True)
    if not (tmp_path / 'venv' / 'bin' / 'python').exists():
        os.symlink(sys.executable, tmp_path / 'venv' / 'bin' / 'python')
    function = re.search(r'^mmcv_cache_dir\(\) \{.*?^\}', (REPO / 'tools/install.sh').read_text(),
                         re.S | re.M)
    done = run_command([shutil.which('bash'), '-c', f'{function.group(0)}\nmmcv_cache_dir'],
                       timeout=60, env={
        **os.environ, 'VENV': str(tmp_path / 'venv'), 'PYTHONPATH': str(tmp_path / 'fake'),
        'MMVISATTN_WHEEL_CACHE': '/cache', **env})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_wheel_cache_is_keyed_by_torch_python_and_cuda(tmp_path):
    """A build without CUDA kernels is never reused by a CUDA torch, nor one of another torch
    release; a CUDA torch asked for a CPU build (make test-oldest: MMVISATTN_MMCV_CUDA=0) takes the
    CPU key."""
    python = f'cp{sys.version_info[0]}{sys.version_info[1]}'
    assert cache_dir(tmp_path, '2.13.0+cpu', None) == f'/cache/torch2.13.0-{python}-cpu'
    assert cache_dir(tmp_path, '2.6.0+cu124', '12.4') == f'/cache/torch2.6.0-{python}-cu124'
    assert cache_dir(tmp_path, '2.6.0+cu124', '12.4',
                     MMVISATTN_MMCV_CUDA='0') == f'/cache/torch2.6.0-{python}-cpu'
