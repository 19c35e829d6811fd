"""`make install` fails at once, in one line, when the toolchain it needs is missing."""
import os
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
        'make install: error: mmcv (/cache/mmcv-2.1.0-cp311-cp311-linux_x86_64.whl) has no working cuda kernels '
        '(cpu_only_nms: RuntimeError: nms_impl: implementation for device cuda:0 not found.); delete the wheel and '
        'run make install again with the CUDA toolkit (nvcc) on PATH\n')


def test_installed_mmcv_runs_its_ops_on_this_machine():
    tool = load_tool('tools/misc/check_mmcv_ops.py')
    assert all(tool.failure(device) is None for device in tool.machine_devices())


def test_wheel_cache_is_keyed_by_the_cuda_version():
    script = (REPO / 'tools/install.sh').read_text()
    assert '("cu" + cuda.replace(".", "") if cuda else "cpu")' in script
    assert '$HOME/.cache/mmvisattn/wheels}/torch$TORCH_VERSION-$tags' in script
