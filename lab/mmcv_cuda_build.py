"""mmcv 2.1.0 compiled with CUDA here for a lent GPU machine (torch 2.11.0+cu130, sm_90), and what a
failed build said. torch 2.11 from PyPI in a CPython 3.12 venv under ``~/.cache/mmvisattn`` brings
the CUDA headers this machine's nvcc lacks; the stripped wheel is cached by torch, CUDA and
architecture.
"""
import base64
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Dict, Optional

# the machine's torch, and the architecture of its GPUs (H100 and H200: compute capability 9.0)
BUILD_TORCH = '2.11.0'
BUILD_CUDA = '13.0'
BUILD_ARCH = '9.0'
CACHE = Path(os.environ.get('MMVISATTN_WHEEL_CACHE',
                            Path.home() / '.cache' / 'mmvisattn' / 'wheels'))


def find_python312() -> str:
    """An interpreter of CPython 3.12 with its headers: ``python3.12`` on PATH, else pyenv's."""
    candidates = [
        shutil.which('python3.12'),
        *sorted(str(p) for p in (Path.home() / '.pyenv' / 'versions').glob('3.12*/bin/python3.12')),
    ]
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, '-c', 'import sysconfig, os; '
                                'assert os.path.exists(sysconfig.get_paths()["include"] + '
                                '"/Python.h")'],
                               capture_output=True)
        if probe.returncode == 0:
            return candidate
    raise SystemExit('error: no CPython 3.12 with its headers found (python3.12 on PATH or under '
                     '~/.pyenv)')


def build_tag() -> str:
    return (
        f'torch{BUILD_TORCH}-cp312-cu{BUILD_CUDA.replace(".", "")}-sm{BUILD_ARCH.replace(".", "")}'
    )


def build_venv() -> Path:
    """A CPython 3.12 venv with the machine's torch (PyPI, CUDA 13.0) to compile against."""
    venv = CACHE.parent / f'build-venv-{build_tag()}'
    python = venv / 'bin' / 'python'
    if not python.exists():
        subprocess.run([find_python312(), '-m', 'venv', str(venv)], check=True)
    probe = subprocess.run([str(python), '-c', 'import torch; print(torch.__version__)'],
                           capture_output=True, text=True)
    if probe.stdout.strip() != f'{BUILD_TORCH}+cu{BUILD_CUDA.replace(".", "")}' and \
            probe.stdout.strip() != BUILD_TORCH:
        print(f'==> installing torch {BUILD_TORCH} (CUDA {BUILD_CUDA}) into {venv} to compile mmcv '
              'against', flush=True)
        subprocess.run([str(python), '-m', 'pip', 'install', '--quiet', f'torch=={BUILD_TORCH}',
                        'setuptools==79.0.1', 'wheel', 'ninja'], check=True)
    return venv


def find_cuda_home() -> str:
    """The CUDA toolkit's folder: ``$CUDA_HOME``, ``/usr/local/cuda`` or nvcc's (with ``bin/nvcc``
    and ``include/cuda_runtime_api.h``)."""
    nvcc = shutil.which('nvcc')
    candidates = [os.environ.get('CUDA_HOME'), '/usr/local/cuda',
                  *(str(p) for p in Path(nvcc).resolve().parents[1:2] if nvcc),]
    for candidate in filter(None, candidates):
        folder = Path(candidate)
        if (folder / 'bin' / 'nvcc').exists() and (
            folder / 'include' / 'cuda_runtime_api.h'
        ).exists():
            return candidate
    raise SystemExit(f'error: no CUDA toolkit found (tried {[c for c in candidates if c]}); mmcv '
                     'cannot be built with CUDA here')


def cuda_environment(venv: Path) -> Dict[str, str]:
    """nvcc from the machine's toolkit; the headers and libraries of cuBLAS, cuSPARSE, ... from
    torch's CUDA wheels (the toolkit here holds the compiler and runtime only)."""
    cuda_home = find_cuda_home()
    wheels = next(venv.glob('lib/python3.12/site-packages/nvidia/cu13'))
    env = dict(os.environ, CUDA_HOME=cuda_home, MMCV_WITH_OPS='1', FORCE_CUDA='1',
               TORCH_CUDA_ARCH_LIST=BUILD_ARCH,
               MAX_JOBS=os.environ.get('MAX_JOBS', str(os.cpu_count() or 2)),
               CPATH=f'{wheels}/include'
               + (f':{os.environ["CPATH"]}' if os.environ.get('CPATH') else ''),
               LIBRARY_PATH=f'{wheels}/lib', LD_LIBRARY_PATH=f'{wheels}/lib:{cuda_home}/lib64')
    return env


def strip_extension(wheel: Path) -> None:
    """The wheel with its extension stripped of symbols (a fifth of the size), RECORD updated."""
    rebuilt = wheel.with_suffix('.stripped')
    with (
        zipfile.ZipFile(wheel) as source,
        zipfile.ZipFile(rebuilt, 'w', zipfile.ZIP_DEFLATED) as target,
    ):
        entries = {name: source.read(name) for name in source.namelist()}
        record_name = next(n for n in entries if n.endswith('.dist-info/RECORD'))
        record = entries[record_name].decode().splitlines()
        for name, data in list(entries.items()):
            if name.endswith('.so'):
                with tempfile.NamedTemporaryFile(suffix='.so') as temp:
                    temp.write(data)
                    temp.flush()
                    subprocess.run(['strip', '--strip-unneeded', temp.name], check=True)
                    data = entries[name] = Path(temp.name).read_bytes()
                digest = (
                    base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()
                )
                record = [f'{name},sha256={digest},{len(data)}' if line.startswith(f'{name},')
                          else line
                          for line in record]
        entries[record_name] = ('\n'.join(record) + '\n').encode()
        for name, data in entries.items():
            target.writestr(name, data)
    rebuilt.replace(wheel)


def cached_mmcv() -> Optional[Path]:
    """The cached build for the machine, where an earlier :func:`built_mmcv` made one."""
    found = sorted((CACHE / build_tag()).glob('mmcv-2.1.0-*.whl'))
    return found[0] if found else None


def built_mmcv(source: Path) -> Path:
    """mmcv compiled with CUDA against the machine's torch, for its architecture (cached)."""
    cache = CACHE / build_tag()
    if cached_mmcv():
        print(f'==> using the cached mmcv CUDA build {cached_mmcv()}', flush=True)
        return cached_mmcv()
    venv = build_venv()
    cache.mkdir(parents=True, exist_ok=True)
    log = cache / 'build.log'
    print(f'==> compiling mmcv 2.1.0 with CUDA {BUILD_CUDA} for sm_{BUILD_ARCH.replace(".", "")} '
          f'against torch {BUILD_TORCH} (log: {log}; once, cached in {cache})', flush=True)
    start = time.time()
    with tempfile.TemporaryDirectory() as work, open(log, 'w') as out:
        result = subprocess.run([str(venv / 'bin' / 'python'), '-m', 'pip', 'wheel',
                                 '--no-build-isolation',
                                 '--no-deps', '-w', work, str(source)], stdout=out,
                                stderr=subprocess.STDOUT, env=cuda_environment(venv))
        if result.returncode != 0:
            raise SystemExit(f'error: the mmcv CUDA build failed; {failed_source(log.read_text())}')
        wheel = next(Path(work).glob('mmcv-*.whl'))
        strip_extension(wheel)
        target = cache / wheel.name
        shutil.copy2(wheel, target)
    print(f'    built in {time.time() - start:.0f} s: {target.name}, '
          f'{target.stat().st_size / 2**20:.1f} MiB')
    return target


def failed_source(log: str, lines: int = 15) -> str:
    """The source of a build log's first failed compile step and what the compiler said."""
    match = re.search(r'FAILED: \S+\.o\s*\n.*?(\S+\.(?:cu|cpp|c))\b', log) or \
        re.search(r'^\s*(\S+\.(?:cu|cpp|c)):\d+:\d+: (?:fatal )?error', log, re.M) or \
        re.search(r'^\s*(\S+\.(?:cu|cpp|c))\(\d+\): error', log, re.M)
    where = f'first failing source: {match.group(1)}' if match else 'no failing source file named'
    text = [line.strip() for line in log.splitlines() if line.strip()]
    failed = next((i for i, line in enumerate(text) if line.startswith('FAILED:')), None)
    if failed is None:
        said = [line for line in text if 'error' in line.lower()] or text
    else:  # after the failed step's command line, until ninja's next step or its stop
        said = []
        for line in text[failed + 2:]:
            if line.startswith('[') or line.startswith('ninja:'):
                break
            said.append(line)
    return where + '; the compiler said:\n' + '\n'.join(said[:lines] if failed is not None
                                                        else said[-lines:])
