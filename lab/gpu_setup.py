"""Install the carried OpenMMLab stack on a bare GPU machine (``make gpu-setup``), without network.

    python tools/misc/gpu_setup.py [--wheelhouse .gpu_wheelhouse] [--target .gpu_site] [--rehearse]

Checks the wheelhouse against its ``MANIFEST.json``, installs its wheels with ``pip --no-index
--no-deps`` into ``--target`` (reused while manifest, torch and GPU stay), and mmcv 2.1.0: the
wheelhouse's CUDA build where it matches this machine, else compiled here from the carried source (a
failure names its first failing file). Then ``check_mmcv_ops.py`` runs mmcv's ops on CUDA; the last
line is the ``PYTHONPATH`` of the ``gpu-*`` targets.

``--rehearse`` (``make test``, no GPU, CPython 3.12): every wheel but mmcv installed the same way
and the machine-independent ones imported.
"""
import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from lab.mmcv_cuda_build import failed_source
from lab.wheelhouse import MANIFEST, check_folder, distribution_name, sha256

REPO = Path(__file__).resolve().parents[1]
STAMP = '.mmvisattn-gpu-setup'
BUILD_ONLY = ('setuptools', 'wheel')
# what the rehearsal imports from its target: the carried packages that need nothing of the GPU
# machine's image (mmengine, mmdet and mmseg need its numpy and torch)
REHEARSAL_IMPORTS = ('addict', 'yapf', 'termcolor', 'terminaltables', 'prettytable', 'ftfy',
                     'wcwidth')


def pip_install(files: List[Path], target: Path) -> None:
    if not files:
        return
    result = subprocess.run([sys.executable, '-m', 'pip', 'install', '--quiet', '--no-index',
                             '--no-deps',
                             '--no-compile', '--no-warn-conflicts', '--upgrade', '--target',
                             str(target), *map(str, files)], capture_output=True, text=True)
    if result.returncode != 0:
        errors = [line for line in result.stderr.splitlines()
                  if line.startswith('ERROR')] or ['(no message)']
        raise SystemExit(
            f'error: installing {len(files)} wheels into {target} failed: {errors[-1]}'
        )


def machine() -> Dict[str, str]:
    import torch
    if not torch.cuda.is_available():
        raise SystemExit(
            'error: no CUDA device: make gpu-setup installs the stack on a GPU machine'
        )
    major, minor = torch.cuda.get_device_capability()
    return dict(torch=torch.__version__.split('+')[0], cuda=torch.version.cuda,
                arch=f'{major}.{minor}', python=f'{sys.version_info[0]}.{sys.version_info[1]}')


def prebuilt_fits(manifest: Dict, here: Dict[str, str]) -> bool:
    build = manifest.get('mmcv_build')
    return bool(build) and all(
        build[key] == here[key] for key in ('torch', 'cuda', 'arch', 'python')
    )


def build_mmcv(wheelhouse: Path, manifest: Dict, arch: str, scratch: Path) -> Path:
    """mmcv compiled here from the carried source for ``arch`` with every core; its wheel."""
    helpers = scratch / 'build-requirements'
    pip_install([wheelhouse / name for name in manifest['build_requirements']], helpers)
    with tarfile.open(wheelhouse / manifest['mmcv_source']) as archive:
        archive.extractall(scratch, filter='data')
    source = next(scratch.glob('mmcv-*/setup.py')).parent
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join([str(helpers), os.environ.get('PYTHONPATH', '')]),
               MMCV_WITH_OPS='1', FORCE_CUDA='1', TORCH_CUDA_ARCH_LIST=arch,
               MAX_JOBS=str(os.cpu_count() or 1))
    print(f'==> compiling mmcv from {manifest["mmcv_source"]} for sm_{arch.replace(".", "")} on '
          f'{env["MAX_JOBS"]} cores (no prebuilt wheel fits this machine)', flush=True)
    start = time.time()
    log = scratch / 'mmcv-build.log'
    with open(log, 'w') as out:
        result = subprocess.run([sys.executable, 'setup.py', 'bdist_wheel', '-d',
                                 str(scratch / 'dist')], cwd=source,
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise SystemExit(f'error: the mmcv build failed; {failed_source(log.read_text())}')
    print(f'    mmcv compiled in {time.time() - start:.0f} s', flush=True)
    return next((scratch / 'dist').glob('mmcv-*.whl'))


def stamp_of(manifest_path: Path, here: Dict[str, str]) -> str:
    return json.dumps(dict(manifest=sha256(manifest_path), **here), sort_keys=True)


def check_mmcv_ops(target: Path, wheel: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), str(REPO),
                                                       os.environ.get('PYTHONPATH', '')]))
    result = subprocess.run([sys.executable, str(REPO / 'tools/misc/check_mmcv_ops.py'), '--wheel',
                             wheel,
                             '--tool', 'make gpu-setup'], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines() or ['(no output)']
        raise SystemExit(lines[-1])
    print(f'    {result.stdout.strip()}')


def setup(wheelhouse: Path, target: Path) -> None:
    here = machine()
    check_folder(wheelhouse)
    manifest = json.loads((wheelhouse / MANIFEST).read_text())
    stamp = stamp_of(wheelhouse / MANIFEST, here)
    if (target / STAMP).exists() and (target / STAMP).read_text() == stamp:
        print(f'==> {target} is up to date (torch {here["torch"]}, CUDA {here["cuda"]}, '
              f'sm_{here["arch"]})')
        return
    start = time.time()
    wheels = [wheelhouse / name for name in manifest['files'] if name.endswith('.whl')
              and distribution_name(Path(name)) not in (*BUILD_ONLY, 'mmcv')]
    print(f'==> installing {len(wheels)} wheels into {target}', flush=True)
    pip_install(wheels, target)
    with tempfile.TemporaryDirectory() as scratch:
        if prebuilt_fits(manifest, here):
            mmcv = wheelhouse / manifest['mmcv_build']['file']
            print(f'==> mmcv: the prebuilt {mmcv.name} (torch {here["torch"]}, CUDA '
                  f'{here["cuda"]}, sm_{here["arch"]})')
        else:
            mmcv = build_mmcv(wheelhouse, manifest, here['arch'], Path(scratch))
        pip_install([mmcv], target)
        check_mmcv_ops(target, mmcv.name)
    (target / STAMP).write_text(stamp)
    print(f'==> set up in {time.time() - start:.0f} s')


def rehearse(wheelhouse: Path, target: Path) -> None:
    """The carried wheels (mmcv aside) into a fresh target, imported from a fresh interpreter."""
    check_folder(wheelhouse)
    manifest = json.loads((wheelhouse / MANIFEST).read_text())
    if target.exists():
        raise SystemExit(f'error: {target} exists; the rehearsal installs into a fresh folder')
    wheels = [wheelhouse / name for name in manifest['files'] if name.endswith('.whl')
              and distribution_name(Path(name)) not in (*BUILD_ONLY, 'mmcv')]
    pip_install(wheels, target)
    code = f'import {", ".join(REHEARSAL_IMPORTS)}'
    result = subprocess.run([sys.executable, '-c', code],
                            env=dict(os.environ, PYTHONPATH=str(target)),
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f'error: after installing {len(wheels)} wheels, {code!r} failed: '
                         f'{result.stderr.strip().splitlines()[-1]}')
    print(f'rehearsal: {len(wheels)} wheels installed into {target} with Python '
          f'{sys.version.split()[0]}; {", ".join(REHEARSAL_IMPORTS)} imported')


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--wheelhouse', type=Path, default=REPO / '.gpu_wheelhouse')
    parser.add_argument('--target', type=Path, default=REPO / '.gpu_site')
    parser.add_argument('--rehearse', action='store_true',
                        help='without a GPU: the wheels but mmcv, into a fresh ' 'target')
    args = parser.parse_args(argv)
    if args.rehearse:
        rehearse(args.wheelhouse, args.target)
        return
    setup(args.wheelhouse, args.target)
    print(f'PYTHONPATH={REPO}:{args.target}')


if __name__ == '__main__':
    main()
