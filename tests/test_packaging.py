"""The wheel users install: built from the checkout's files (as a fresh clone has them), it carries
the library, the ops' C++ sources and, under ``mmvisattn/.mim/``, the configs, tools,
``model-index.yml`` and demo, and nothing of the lab. Installed with ``--no-deps`` into a fresh
virtual environment that sees the stack (make install's site-packages, without the editable
install), outside the checkout: ``mim search``, ``mim train`` of the ViL demo for a few iterations,
``mim test`` of its checkpoint, and a backbone built from a user's config that starts from one of
ours in the documented way (``python -m mmvisattn.configs``)."""
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from .conftest import REPO, run_command

# make test-lab
pytestmark = [pytest.mark.xdist_group('packaging'), pytest.mark.starts_first, pytest.mark.lab]
DEMO = 'retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py'
# a short run of the demo: a few iterations, two images a batch, no workers, the data read small
SHORT = ['train_cfg.max_iters=4', 'train_cfg.val_interval=4', 'train_dataloader.batch_size=2',
         'train_dataloader.num_workers=0', 'train_dataloader.persistent_workers=False',
         'val_dataloader.num_workers=0', 'val_dataloader.persistent_workers=False',
         'test_dataloader.num_workers=0', 'test_dataloader.persistent_workers=False',
         'default_hooks.checkpoint.interval=4']


def checkout_files() -> list:
    """The files a clone has: tracked, and new ones git does not ignore."""
    listed = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard', '-z'],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [name for name in listed.split('\0') if name and (REPO / name).is_file()]


@pytest.fixture(scope='module')
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the checkout's files (the build writes nothing into the
    checkout)."""
    source, out = tmp_path_factory.mktemp('source'), tmp_path_factory.mktemp('wheel')
    for name in checkout_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name, follow_symlinks=False)
    done = run_command([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation',
                        '--no-index', '-w', str(out), str(source)], timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return next(out.glob('mmvisattn-*.whl'))


def test_the_wheel_carries_the_library_and_its_configs_not_the_lab(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = 'mmvisattn/.mim/'
    assert f'{shipped}model-index.yml' in names and f'{shipped}configs/vil/{DEMO}' in names
    assert {f'{shipped}tools/train.py', f'{shipped}tools/test.py', f'{shipped}tools/dist_train.sh',
            f'{shipped}tools/misc/make_demo_data.py', f'{shipped}demo/image_demo.py'} <= names
    assert {'mmvisattn/ops/ripple/cpu.cpp', 'mmvisattn/ops/utils/cpu_kernels.h',
            'mmvisattn/configs.py'} <= names
    configs = {name for name in names if name.startswith(f'{shipped}configs/')
               and name.endswith('.py')}
    assert len(configs) == len([p for p in (REPO / 'configs').rglob('*.py')])
    lab = [name for name in names if name.startswith('lab/') or name.endswith(
        ('tools/misc/gpu_wheelhouse.py', 'tools/misc/gpu_setup.py', 'tools/install.sh'))]
    assert not lab, lab
    assert not [name for name in names if '__pycache__' in name or name.endswith('.pyc')]


def stack_site_packages() -> Path:
    """make install's site-packages: the stack, with mmvisattn only as its editable install's
    ``.pth``."""
    return Path(sysconfig.get_paths()['purelib'])


@pytest.fixture(scope='module')
def installed(wheel, tmp_path_factory):
    """A fresh venv that sees the stack (a plain path line, so the editable install's own ``.pth``
    is not read), the wheel installed into it with ``--no-deps``; a folder outside the checkout to
    work in."""
    root = tmp_path_factory.mktemp('user')
    venv = root / 'venv'
    python = Path(getattr(sys, '_base_executable', sys.executable))
    done = run_command([str(python), '-m', 'venv', str(venv)], timeout=120)
    assert done.returncode == 0, done.stderr
    user_python = venv / 'bin' / 'python'
    purelib = run_command([str(user_python), '-c',
                           'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                          timeout=60).stdout.strip()
    (Path(purelib) / 'stack.pth').write_text(f'{stack_site_packages()}\n')
    done = run_command([str(user_python), '-m', 'pip', 'install', '--quiet', '--no-deps',
                        '--no-index', str(wheel)],
                       timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    work = root / 'work'
    work.mkdir()
    return user_python, work


def user_run(installed, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python args`` in the user's venv and folder, with nothing of the checkout on its path."""
    python, work = installed
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ('PYTHONPATH', 'MMVISATTN_PYTHON_RUNNER')
    }
    env['PATH'] = f'{python.parent}{os.pathsep}{env.get("PATH", "")}'
    done = run_command([str(python), *args], timeout=timeout, cwd=work, env=env)
    assert done.returncode == 0, f'{args}\n{done.stdout[-3000:]}\n{done.stderr[-4000:]}'
    return done


def test_the_installed_package_is_the_wheel(installed):
    done = user_run(installed, '-c',
                    'import mmvisattn, mmvisattn.configs as c; print(mmvisattn.__file__); '
                                     'print(c.CONFIGS.is_dir() and not c.CONFIGS.is_symlink())')
    path, real_folder = done.stdout.split()[-2:]
    assert not Path(path).is_relative_to(REPO) and Path(path).is_relative_to(
        installed[0].parents[1]
    )
    assert real_folder == 'True'
    assert user_run(installed, '-c', 'import importlib.util; print(importlib.util.find_spec("lab"))'
                    ).stdout.strip() == 'None'


def test_mim_finds_the_model_zoo(installed):
    done = user_run(installed, '-m', 'mim', 'search', 'mmvisattn', '--field', 'config')
    assert 'retinanet_vil-small_fpn_1x_coco' in done.stdout


def test_mim_trains_and_tests_the_demo(installed):
    _, work = installed
    user_run(installed, '-m', 'mmvisattn.utils.demo_data', '--out', 'data/shapes', '--num-train',
             '8', '--num-val', '4')
    user_run(installed, '-m', 'mim', 'train', 'mmvisattn', DEMO, '--work-dir', 'run',
             '--cfg-options', *SHORT)
    checkpoint = work / 'run' / 'iter_4.pth'
    assert checkpoint.is_file()
    done = user_run(installed, '-m', 'mim', 'test', 'mmvisattn', DEMO, '--checkpoint',
                    str(checkpoint), '--work-dir', 'run', '--cfg-options',
                    *[option for option in SHORT if 'test_' in option])
    # four iterations detect nothing yet: the COCO metric runs on no boxes
    said = done.stdout + done.stderr
    assert f'Load checkpoint from {checkpoint}' in said and 'Evaluating bbox' in said


def test_a_user_config_starts_from_ours(installed):
    _, work = installed
    user_run(installed, '-m', 'mmvisattn.configs', 'copy', 'vil/retinanet_vil-small_fpn_1x_coco.py',
             'mine')
    (work / 'mine' / 'my_vil.py').write_text(
        "_base_ = './retinanet_vil-small_fpn_1x_coco.py'\nmodel = "
        "dict(backbone=dict(drop_path_rate=0.0))\n")
    shipped = user_run(installed, '-m', 'mmvisattn.configs', 'path',
                       'vil/retinanet_vil-small_fpn_1x_coco.py')
    (work / 'mine' / 'by_path.py').write_text(f"_base_ = '{shipped.stdout.strip()}'\n")
    build = ('import sys; from mmengine.config import Config; import mmvisattn; from '
             'mmdet.registry import MODELS; cfg = Config.fromfile(sys.argv[1]); backbone = '
             'MODELS.build(cfg.model.backbone); print(type(backbone).__name__, '
             'cfg.model.backbone.drop_path_rate, sum(p.numel() for p in backbone.parameters()))')
    mine = user_run(installed, '-c', build, 'mine/my_vil.py').stdout.split()
    by_path = user_run(installed, '-c', build, 'mine/by_path.py').stdout.split()
    assert mine[0] == 'ViL' and mine[1] == '0.0' and by_path[0] == 'ViL' and by_path[2] == mine[2]


def test_a_config_name_that_is_not_shipped_is_one_line(tmp_path):
    from mmvisattn.configs import config_file, copy_config, main
    assert config_file('configs/vil/' + DEMO).samefile(config_file('vil/' + DEMO))
    with pytest.raises(SystemExit) as error:
        main(['path', 'vil/no_such_config.py'])
    assert str(error.value).startswith('error: vil/no_such_config.py: neither a file nor one of '
                                       'the configs')
    copied = copy_config('vil/' + DEMO, tmp_path)
    assert copy_config('vil/' + DEMO, tmp_path) == copied  # the same copy again: left as it is
    copied.write_text('# mine\n')
    with pytest.raises(FileExistsError, match='exists and is not a copy of'):
        copy_config('vil/' + DEMO, tmp_path)
