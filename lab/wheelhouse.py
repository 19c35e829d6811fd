"""The OpenMMLab stack for a bare GPU machine, prepared here (``make gpu-wheelhouse``).

    python tools/misc/gpu_wheelhouse.py [--out .gpu_wheelhouse] [--mmcv-build | --no-mmcv-build]
    [--check-only]

Into ``--out`` (an ignored folder that travels with the working tree):

* the wheels of ``requirements/gpu_wheelhouse.txt`` (mmengine, mmdet, mmsegmentation and what the
  machine's image lacks, CPython 3.12 manylinux), by ``pip download --no-deps``;
* mmcv 2.1.0's source, for a build there (with setuptools < 80);
* mmcv 2.1.0 built with CUDA for the image's torch and sm_90 where cached (``mmcv_cuda_build.py``;
  only ``--mmcv-build`` compiles, over an hour here);
* ``MANIFEST.json``: every file's size and sha256, and the prebuilt mmcv's torch, CUDA and
  architecture.

The set is first checked complete: every ``Requires-Dist`` (markers for CPython 3.12 on Linux) is in
it or on the machine (``requirements/gpu_machine.txt``), as are mmseg's undeclared imports.
``--check-only`` checks a folder. At most 40 MiB; only files this tool wrote are replaced or
removed.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from lab.mmcv_cuda_build import (
    BUILD_ARCH,
    BUILD_CUDA,
    BUILD_TORCH,
    CACHE,
    build_tag,
    built_mmcv,
    cached_mmcv,
)

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / 'requirements' / 'gpu_wheelhouse.txt'
MACHINE = REPO / 'requirements' / 'gpu_machine.txt'
MANIFEST = 'MANIFEST.json'
LIMIT_MIB = 40
PYTHON_TAG = '3.12'
PLATFORMS = ('manylinux_2_28_x86_64', 'manylinux_2_27_x86_64', 'manylinux_2_24_x86_64',
             'manylinux_2_17_x86_64', 'manylinux2014_x86_64', 'manylinux1_x86_64', 'any')
# what the machine provides under another name than the one declared
PROVIDED_AS = {'opencv-python': 'opencv-python-headless'}
# imported at start-up without being declared (mmseg/utils/tokenizer.py)
UNDECLARED = ('ftfy', 'regex')
MMCV = 'mmcv==2.1.0'
SIMPLE_INDEX = os.environ.get('MMVISATTN_SIMPLE_INDEX', 'https://pypi.org/simple')


def canonical(name: str) -> str:
    return re.sub(r'[-_.]+', '-', name).lower()


def read_names(path: Path) -> List[str]:
    return [line.split('#')[0].strip() for line in path.read_text().splitlines()
            if line.split('#')[0].strip()]


def pinned(path: Path = LOCK) -> Dict[str, str]:
    """``{canonical name: version}`` of the lock file; every line must be ``name==version``."""
    pins = {}
    for line in read_names(path):
        name, sep, version = line.partition('==')
        if not sep or not version:
            raise SystemExit(f'error: {path.name}: {line!r} is not pinned exactly (name==version)')
        pins[canonical(name)] = version
    return pins


def wheel_metadata(wheel: Path):
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith('.dist-info/METADATA'))
        return Parser().parsestr(archive.read(name).decode())


def requirements_of(wheel: Path) -> List[str]:
    """The canonical ``Requires-Dist`` names applying on CPython 3.12 / Linux, no extras."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # a bare Python (the rehearsal's): pip's own copy
        from pip._vendor.packaging.requirements import Requirement
    environment = dict(python_version=PYTHON_TAG, python_full_version=f'{PYTHON_TAG}.3',
                       sys_platform='linux', platform_system='Linux', os_name='posix',
                       platform_machine='x86_64', implementation_name='cpython',
                       platform_python_implementation='CPython', extra='')
    names = []
    for line in wheel_metadata(wheel).get_all('Requires-Dist') or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate(environment):
            names.append(canonical(requirement.name))
    return names


def distribution_name(path: Path) -> str:
    if path.name.endswith('.whl'):
        return canonical(path.name.split('-')[0])
    return canonical(re.sub(r'-[0-9][^-]*\.tar\.gz$', '', path.name))


def missing_requirements(wheels: Sequence[Path], machine: Iterable[str]) -> List[str]:
    """``'<requirement> (of <wheel>)'`` for each requirement neither carried nor on the machine."""
    have = {distribution_name(w) for w in wheels} | {canonical(n) for n in machine}
    have |= {declared for declared, provided in PROVIDED_AS.items() if canonical(provided) in have}
    missing = [f'{name} (of {wheel.name})' for wheel in wheels if wheel.name.endswith('.whl')
               for name in requirements_of(wheel) if name not in have]
    missing += [f'{name} (imported by mmsegmentation, undeclared)' for name in UNDECLARED
                if name not in have]
    return missing


def pip_download(spec: str, dest: Path) -> Path:
    """The wheel of ``spec`` for CPython 3.12 manylinux x86_64, downloaded into ``dest``."""
    before = set(dest.iterdir())
    command = [sys.executable, '-m', 'pip', 'download', '--quiet', '--no-deps',
               '--only-binary=:all:', '--python-version', PYTHON_TAG, '--implementation', 'cp',
               '--abi', 'cp312', '--abi', 'abi3', '--abi', 'none',
               *(f'--platform={p}' for p in PLATFORMS), '-d', str(dest), spec]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        last = [line for line in result.stderr.splitlines()
                if line.startswith('ERROR')] or ['(no message)']
        raise SystemExit(f'error: pip download {spec} failed: {last[-1]}')
    name, version = spec.split('==')
    found = [p for p in dest.iterdir() if distribution_name(p) == canonical(name)
             and f'-{version}-' in p.name]
    if not found:
        raise SystemExit(f'error: pip download {spec} wrote no wheel of {name} {version} (new: '
                         f'{sorted(p.name for p in set(dest.iterdir()) - before)})')
    return found[0]


def download_sdist(spec: str, dest: Path) -> Path:
    """The source archive of ``spec`` from the index's simple page, its sha256 checked (``pip
    download`` would run mmcv's ``setup.py``, which needs torch)."""
    name, version = spec.split('==')
    page = urllib.request.urlopen(f'{SIMPLE_INDEX}/{name}/', timeout=60).read().decode()
    match = re.search(rf'href="([^"]*/{name}-{re.escape(version)}\.tar\.gz)#sha256=([0-9a-f]+)"',
                      page)
    if match is None:
        raise SystemExit(f'error: {SIMPLE_INDEX}/{name}/ lists no {name}-{version}.tar.gz')
    url, digest = match.groups()
    data = urllib.request.urlopen(url, timeout=300).read()
    if hashlib.sha256(data).hexdigest() != digest:
        raise SystemExit(f'error: {url}: sha256 does not match the index')
    target = dest / url.rsplit('/', 1)[1]
    target.write_bytes(data)
    return target


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, 'rb') as file:
        for block in iter(lambda: file.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def check_out_folder(out: Path) -> Optional[Dict]:
    """The folder's earlier manifest, or ``None`` for a new one; refuses what it did not write."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise SystemExit(f'error: {out} is a link or a file; expected a folder this tool writes')
    if not out.exists():
        return None
    manifest = out / MANIFEST
    if not manifest.exists():
        if any(out.iterdir()):
            raise SystemExit(f'error: {out} is not empty and holds no {MANIFEST}: not a wheelhouse '
                             'of this tool')
        return None
    return json.loads(manifest.read_text())


def check_size(files: Sequence[Path]) -> float:
    size = sum(f.stat().st_size for f in files) / 2 ** 20
    if size > LIMIT_MIB:
        raise SystemExit(f'error: the wheelhouse holds {size:.1f} MiB, over its {LIMIT_MIB} MiB')
    return size


def write_manifest(out: Path, files: Sequence[Path], mmcv: Optional[Path]) -> Dict:
    manifest = dict(files={f.name: dict(bytes=f.stat().st_size, sha256=sha256(f)) for f in files},
                    mmcv_source=next(f.name for f in files if f.name.startswith('mmcv-') and
                                     f.name.endswith('.tar.gz')),
                    mmcv_build=None if mmcv is None
                    else dict(file=mmcv.name, torch=BUILD_TORCH, cuda=BUILD_CUDA,
                                                              arch=BUILD_ARCH, python='3.12'),
                    build_requirements=[f.name for f in files
                                        if distribution_name(f) in ('setuptools', 'wheel')])
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def check_folder(out: Path) -> None:
    """Every file of the manifest there with its sha256, and the set complete."""
    manifest = check_out_folder(out)
    if manifest is None:
        raise SystemExit(f'error: {out} holds no {MANIFEST}; run make gpu-wheelhouse')
    for name, entry in manifest['files'].items():
        path = out / name
        if not path.exists():
            raise SystemExit(f'error: the wheelhouse {out} lacks {name}; run make gpu-wheelhouse')
        if path.stat().st_size != entry['bytes'] or sha256(path) != entry['sha256']:
            raise SystemExit(f'error: {path} differs from {MANIFEST} (size or sha256); run make '
                             'gpu-wheelhouse')
    missing = missing_requirements([out / n for n in manifest['files']], read_names(MACHINE))
    if missing:
        raise SystemExit(
            f'error: the wheelhouse {out} lacks {missing[0]}'
            + (f' and {len(missing) - 1} more' if len(missing) > 1 else '')
        )


def gather(out: Path, mmcv_build: str) -> Tuple[List[Path], Optional[Path]]:
    """Download into a staging folder beside ``out`` with the mmcv build (``cached``, ``compile`` or
    ``none``); returns its files and the build."""
    staging = out.with_name(f'.{out.name}.partial')
    if staging.exists():
        shutil.rmtree(staging)  # this tool's own staging folder, left by an interrupted run
    staging.mkdir(parents=True)
    for name, version in pinned().items():
        print(f'    {name}=={version}', flush=True)
        pip_download(f'{name}=={version}', staging)
    download_sdist(MMCV, staging)
    mmcv = None
    if mmcv_build == 'compile' or (mmcv_build == 'cached' and cached_mmcv()):
        mmcv = staging / built_mmcv(next(staging.glob('mmcv-*.tar.gz'))).name
        shutil.copy2(CACHE / build_tag() / mmcv.name, mmcv)
    elif mmcv_build == 'cached':
        print(f'==> no cached mmcv CUDA build ({CACHE / build_tag()}): make gpu-setup compiles the '
              'carried source '
              'there (--mmcv-build compiles it here, over an hour on 2 cores)', flush=True)
    files = sorted(staging.iterdir())
    missing = missing_requirements([f for f in files if not f.name.startswith('mmcv-')] +
                                   ([mmcv] if mmcv else []), read_names(MACHINE))
    if missing:
        raise SystemExit(f'error: {LOCK.name} is incomplete: nothing carries {missing[0]}' +
                         (f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''))
    check_size(files)
    return files, mmcv


def install(staging_files: Sequence[Path], out: Path, earlier: Optional[Dict],
            mmcv: Optional[Path]) -> None:
    """Move the staged files into ``out``, removing only the earlier manifest's replaced files."""
    out.mkdir(parents=True, exist_ok=True)
    for name in (earlier or {}).get('files', {}):
        if not (out / name).is_symlink() and (out / name).is_file():
            (out / name).unlink()
    for path in staging_files:
        path.replace(out / path.name)
    write_manifest(out, [out / p.name for p in staging_files],
                   None if mmcv is None else out / mmcv.name)
    staging_files[0].parent.rmdir()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out', type=Path, default=REPO / '.gpu_wheelhouse')
    build = parser.add_mutually_exclusive_group()
    build.add_argument('--mmcv-build', action='store_const', dest='mmcv_build', const='compile',
                       default='cached',
                       help='compile the mmcv CUDA build here where none is cached (default: the '
                       'cached one, else none)')
    build.add_argument('--no-mmcv-build', action='store_const', dest='mmcv_build', const='none',
                       help='leave out the mmcv CUDA build, even a cached one (the machine then '
                       'compiles it from the carried source)')
    parser.add_argument('--check-only', action='store_true',
                        help='check the folder; download nothing')
    args = parser.parse_args(argv)
    out = args.out.resolve() if not args.out.is_symlink() else args.out
    if args.check_only:
        check_folder(out)
    else:
        earlier = check_out_folder(out)
        print(f'==> downloading the wheels of {LOCK.relative_to(REPO)} for CPython {PYTHON_TAG} '
              'manylinux x86_64')
        files, mmcv = gather(out, args.mmcv_build)
        install(files, out, earlier, mmcv)
        check_folder(out)
    files = [out / n for n in json.loads((out / MANIFEST).read_text())['files']]
    print(f'{len(files)} files, {check_size(files):.1f} MiB of at most {LIMIT_MIB}')
    print(out)


if __name__ == '__main__':
    main()
