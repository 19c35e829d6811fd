"""`make install` fails at once, in one line, when the toolchain it needs is missing."""
import os
import shutil
import sys

from ..conftest import REPO, run_command


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
