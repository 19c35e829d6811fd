"""The ops' C++ CPU kernels, compiled on first use.

An op with a ``cpu`` backend keeps its kernels in ``<op>/cpu.cpp`` as
``torch.ops.mmvisattn_<op>_cpu.*``, exposed by ``cpu.py`` as custom operators (with fake
implementations for ``torch.compile``). :func:`load_cpu_kernels` compiles into torch's extension
cache, rebuilt when the source changes; ``make install`` compiles each once, so a compiler problem
surfaces there."""
import functools
import os
import shutil
from pathlib import Path
from typing import Any, List

import torch

OPS_DIR = Path(__file__).parents[1]  # the op packages, each with its cpu.cpp
# one build folder per torch release (a build does not load into another; make install's and make
# test-oldest's environments share the cache)
TORCH_TAG = 'torch' + torch.__version__.split('+')[0].replace('.', '_')

# -fopenmp: at::parallel_for and `omp simd` (joining torch's OpenMP runtime); -fno-trapping-math,
# -fno-math-errno: otherwise GCC keeps selects and reductions scalar for exception flags and errno
# (torch builds with both)
CFLAGS = ('-O3', '-fopenmp', '-fno-trapping-math', '-fno-math-errno')


class CpuKernelBuildError(RuntimeError):
    """A kernel source did not compile; the message is one line."""


@functools.lru_cache(maxsize=None)
def load_cpu_kernels(op: str) -> Any:
    """Compile (or find cached) ``<op>/cpu.cpp`` and return its ``torch.ops`` namespace; a failed
    build raises :class:`CpuKernelBuildError` naming the source and the way round it."""
    from torch.utils import cpp_extension
    source = OPS_DIR / op / 'cpu.cpp'
    _put_ninja_on_path()
    try:
        cpp_extension.load(name=f'mmvisattn_{op}_cpu_{TORCH_TAG}', sources=[str(source)],
                           extra_cflags=list(CFLAGS),
                           extra_ldflags=['-fopenmp'], is_python_module=False, verbose=False)
    except (RuntimeError, OSError) as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        # the compiler's first error says more than ninja's summary line before it
        reason = next((line for line in lines if 'error:' in line),
                      lines[0] if lines else type(error).__name__)
        raise CpuKernelBuildError(f'{source}: the CPU kernels did not compile ({reason.strip()}); '
                                  'they need a C++ '
                                  "compiler and ninja (make install sets both up); impl='torch' "
                                  "runs without them"
                                  ) from None
    return getattr(torch.ops, f'mmvisattn_{op}_cpu')


def _put_ninja_on_path() -> None:
    """Put the pip ``ninja`` (``make install`` installs it) first on ``PATH`` for torch's builds:
    two ninja versions hash a build command differently, so each would rebuild what the other built.
    A pip ninja found through a relative ``PATH`` entry does not count (torch runs ninja in the
    build folder)."""
    try:
        import ninja
    except ImportError:
        return  # the machine's ninja builds, or the build fails and says so
    found = shutil.which('ninja')
    if (
        found is None
        or not os.path.isabs(found)
        or Path(found).resolve().parent != Path(ninja.BIN_DIR).resolve()
    ):
        os.environ['PATH'] = os.pathsep.join([ninja.BIN_DIR, os.environ.get('PATH', '')])


def load_every_cpu_kernel() -> List[str]:
    """Compile every op's ``cpu.cpp`` (``make install`` calls it); returns the ops."""
    ops = sorted(source.parent.name for source in OPS_DIR.glob('*/cpu.cpp'))
    for op in ops:
        load_cpu_kernels(op)
    return ops
