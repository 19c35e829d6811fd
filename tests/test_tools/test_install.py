"""`make install` fails at once, in one line, when the toolchain it needs is missing."""
import os
import shutil
import subprocess
import sys

from ..conftest import REPO


def run_install(env):
    return subprocess.run([shutil.which('bash'), str(REPO / 'tools/install.sh')], env=env, capture_output=True,
                          text=True,
                          timeout=60)


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
