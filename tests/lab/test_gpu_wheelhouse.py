"""gpu_wheelhouse.py and gpu_setup.py: the OpenMMLab stack for a bare GPU machine, rehearsed here.

The wheels are downloaded from the package registry (mmcv's CUDA build left out: it compiles for
about 40 minutes), checked complete against every wheel's ``Requires-Dist`` and the GPU machine's
packages, and installed with ``--no-index --no-deps`` into a fresh CPython 3.12 target; a missing
wheel, an incomplete set and a failed build are named in one line."""
import json
import os
import shutil
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest

from ..conftest import REPO, run_command, tool_env

WHEELHOUSE = 'tools/misc/gpu_wheelhouse.py'
SETUP = 'tools/misc/gpu_setup.py'
# the tests that share the module's fixture run on one worker: it runs once, no worker waits for it
pytestmark = pytest.mark.xdist_group('gpu_wheelhouse')


@pytest.fixture(scope='module')
def tool():
    return import_module('lab.wheelhouse')


@pytest.fixture(scope='module')
def build():
    return import_module('lab.mmcv_cuda_build')


@pytest.fixture(scope='module')
def wheelhouse(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp('gpu_wheelhouse')
    make_wheelhouse(folder)
    return folder / 'wheelhouse'


def make_wheelhouse(folder: Path) -> None:
    out = folder / 'wheelhouse'
    done = run_command([sys.executable, str(REPO / WHEELHOUSE), '--out', str(out),
                        '--no-mmcv-build'], timeout=300,
                       env=tool_env())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == str(out)


def test_every_pin_is_carried_within_the_limit(tool, wheelhouse):
    manifest = json.loads((wheelhouse / 'MANIFEST.json').read_text())
    carried = {tool.distribution_name(Path(name)) for name in manifest['files']}
    assert set(tool.pinned()) | {'mmcv'} == carried
    assert {'mmengine', 'mmdet', 'mmsegmentation', 'ftfy', 'pycocotools'} <= carried
    assert manifest['mmcv_source'] == 'mmcv-2.1.0.tar.gz' and manifest['mmcv_build'] is None
    assert sum(entry['bytes'] for entry in manifest['files'].values()) <= tool.LIMIT_MIB * 2 ** 20
    assert tool.missing_requirements([wheelhouse / n for n in manifest['files']],
                                     tool.read_names(tool.MACHINE)) == []


def test_rehearsal_installs_into_a_fresh_python312_target(build, wheelhouse, tmp_path):
    python = build.find_python312()  # with the checkout on its path, as `make gpu-setup` runs it
    done = run_command([python, str(REPO / SETUP), '--rehearse', '--wheelhouse', str(wheelhouse),
                        '--target', str(tmp_path / 'site')], timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert 'ftfy' in done.stdout and (tmp_path / 'site' / 'mmdet' / '.mim' / 'configs').is_dir()
    assert (tmp_path / 'site' / 'mmseg').is_dir() and not (tmp_path / 'site' / 'mmcv').exists()


def test_a_missing_wheel_is_named(wheelhouse, tmp_path):
    partial = tmp_path / 'partial'
    shutil.copytree(wheelhouse, partial)
    next(partial.glob('terminaltables-*.whl')).unlink()
    done = run_command([sys.executable, str(REPO / WHEELHOUSE), '--out', str(partial),
                        '--check-only'],
                       env=tool_env())
    assert (done.returncode == 1
            and 'lacks terminaltables-3.1.10-py2.py3-none-any.whl' in done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1


def test_requirements_are_checked_against_the_machine(tool, wheelhouse):
    wheels = [w for w in wheelhouse.iterdir() if w.name.endswith('.whl')
              and not w.name.startswith('wcwidth')]
    machine = tool.read_names(tool.MACHINE)
    assert tool.missing_requirements(wheels, machine) == [
        'wcwidth (of ftfy-6.3.1-py3-none-any.whl)',
        'wcwidth (of prettytable-3.18.0-py3-none-any.whl)']
    # mmengine declares opencv-python; the machine's opencv-python-headless stands for it
    assert 'opencv-python' not in machine and 'opencv-python-headless' in machine
    no_regex = [name for name in machine if name != 'regex']
    assert 'regex (imported by mmsegmentation, undeclared)' in tool.missing_requirements(
        wheels, no_regex
    )


def test_a_folder_it_did_not_write_is_refused(tmp_path):
    (tmp_path / 'mine.txt').write_text('a user file')
    done = run_command([sys.executable, str(REPO / WHEELHOUSE), '--out', str(tmp_path)],
                       env=tool_env())
    assert done.returncode == 1 and 'holds no MANIFEST.json' in done.stderr
    assert (tmp_path / 'mine.txt').read_text() == 'a user file'


def test_setup_without_cuda_is_one_line(wheelhouse, tmp_path):
    done = run_command([sys.executable, str(REPO / SETUP), '--wheelhouse', str(wheelhouse),
                        '--target', str(tmp_path / 'site')], env=tool_env())
    assert done.returncode == 1 and done.stderr.strip() == \
        'error: no CUDA device: make gpu-setup installs the stack on a GPU machine'


def test_a_failed_build_names_its_source(build):
    log = '\n'.join(['[1/3] c++ -c /src/mmcv/ops/csrc/pytorch/nms.cpp',
                     'FAILED: /b/temp/cuda/roi_align_cuda.o', '/usr/local/cuda/bin/nvcc -c '
                     '/src/mmcv/ops/csrc/pytorch/cuda/roi_align_cuda.cu -o x.o',
                     "/src/mmcv/ops/csrc/pytorch/cuda/roi_align_cuda.cu(12): error: identifier 'x' "
                     "is undefined", 'ninja: build stopped: subcommand failed.'])
    message = build.failed_source(log)
    assert message.startswith('first failing source: '
                              '/src/mmcv/ops/csrc/pytorch/cuda/roi_align_cuda.cu;')
    assert message.endswith("the compiler "
                            "said:\n/src/mmcv/ops/csrc/pytorch/cuda/roi_align_cuda.cu(12): error: "
                            "identifier 'x' is undefined")
    real = build.failed_source(
        '\n'.join(
            [
                '  [104/136] c++ -MMD -MF /b/info.o.d -c /s/mmcv/ops/csrc/pytorch/info.cpp '
                '-o /b/info.o', '  FAILED: /b/info.o',
                '  c++ -MMD -MF /b/info.o.d -I/root/.cache/x -c '
                '/s/mmcv/ops/csrc/pytorch/info.cpp -o /b/info.o',
                '  In file included from /s/mmcv/ops/csrc/pytorch/info.cpp:15:',
                '  /v/cuda_runtime_api.h:148:10: fatal error: crt/host_defines.h: '
                'No such file or directory', '  compilation terminated.',
                '  [105/136] c++ -c group_points.cpp', '  ninja: build stopped: subcommand failed.',
                '  Traceback (most recent call last):',
                '  RuntimeError: Error compiling objects for extension',
            ]
        )
    )
    assert real.startswith('first failing source: /s/mmcv/ops/csrc/pytorch/info.cpp;')
    assert (
        real.endswith('No such file or directory\ncompilation terminated.')
        and 'Traceback' not in real
    )


def test_the_stripped_wheel_keeps_a_valid_record(build, tmp_path):
    import zipfile
    library = tmp_path / 'lib.so'
    subprocess.run(['cc', '-shared', '-g', '-o', str(library), '-x', 'c', '-'],
                   input=b'int f(void){return 1;}', check=True)
    wheel = tmp_path / 'demo-1.0-cp312-cp312-linux_x86_64.whl'
    with zipfile.ZipFile(wheel, 'w') as archive:
        archive.write(library, 'demo/_ext.so')
        archive.writestr('demo-1.0.dist-info/RECORD',
                         f'demo/_ext.so,sha256=old,{library.stat().st_size}\n')
    build.strip_extension(wheel)
    with zipfile.ZipFile(wheel) as archive:
        data = archive.read('demo/_ext.so')
        record = archive.read('demo-1.0.dist-info/RECORD').decode()
    assert len(data) < library.stat().st_size and record.startswith('demo/_ext.so,sha256=')
    assert record.strip().endswith(f',{len(data)}') and 'old' not in record
