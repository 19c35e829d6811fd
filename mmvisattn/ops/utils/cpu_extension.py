"""The ops' C++ CPU kernels, compiled on first use.

An op with a ``cpu`` backend keeps its kernels in ``<op>/cpu.cpp``, registered as
``torch.ops.mmvisattn_<op>_cpu.*``, beside the ``cpu.py`` that exposes them as custom operators
(with fake implementations for ``torch.compile``) in an autograd Function. :func:`load_cpu_kernels`
compiles a source into torch's extension cache (``$TORCH_EXTENSIONS_DIR``), rebuilt when the source
changes; ``make install`` compiles every kernel once, so a compiler problem surfaces there. On CPU
the kernels do a chunk's softmax, masks and gathers while its scores are in cache, where the torch
path passes over them in memory."""
import functools
import os
import shutil
from pathlib import Path
from typing import Any, List

import torch

OPS_DIR = Path(__file__).parents[1]  # the op packages, each with its cpu.cpp
# in each build's name: one build folder per torch release, as a kernel built against one does not
# load into another, and two environments of one machine (make install's and make test-oldest's)
# share the cache
TORCH_TAG = 'torch' + torch.__version__.split('+')[0].replace('.', '_')

# -fopenmp: at::parallel_for and the `omp simd` loops (the library joins the OpenMP runtime torch
# loaded: same soname). -fno-trapping-math, -fno-math-errno: without them GCC keeps float selects
# and reductions scalar for the sake of floating-point exception flags and errno; the values are
# IEEE's either way, and torch builds itself with both.
CFLAGS = ('-O3', '-fopenmp', '-fno-trapping-math', '-fno-math-errno')


class CpuKernelBuildError(RuntimeError):
    """A kernel source did not compile; the message is one line."""


@functools.lru_cache(maxsize=None)
def load_cpu_kernels(op: str) -> Any:
    """Compile (or find in the cache) ``<op>/cpu.cpp`` and return its
    ``torch.ops.mmvisattn_<op>_cpu`` namespace; a failed build raises :class:`CpuKernelBuildError`
    naming the source and the way round it."""
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
    """torch builds with the ``ninja`` first on ``PATH``; this puts the pip ``ninja``
    (``make install`` installs it) there whenever it is installed. One ninja for every process,
    whatever its ``PATH``: two versions hash a build command differently (1.13 changed its log's
    hash), so each would rebuild what the other built last, and a machine's own ninja is often
    another version than pip's. A pip ninja found through a relative ``PATH`` entry
    (``PATH=.venv/bin:...``) does not count: torch runs ninja in the build folder, where that entry
    names nothing and the machine's ninja answers."""
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
    """Compile the kernels of every op with a ``cpu.cpp`` (``make install`` calls it); returns the
    ops."""
    ops = sorted(source.parent.name for source in OPS_DIR.glob('*/cpu.cpp'))
    for op in ops:
        load_cpu_kernels(op)
    return ops
