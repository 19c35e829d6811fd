"""Shared fixtures: the devices the op and attention tests run on and the tolerances of their
products, the repository root, the demo data written once per session, and a runner for the
command-line tools as a user calls them (a subprocess in a scratch working directory).

This file needs torch and pytest alone: the op tests (``tests/test_ops``) run where OpenMMLab is
not installed, as on a bare GPU machine (``python -m pytest tests/test_ops``)."""
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

# Under pytest-xdist (`make test` runs two workers) each worker takes its share of the cores, and
# the tools it starts as much: two workers each running two OpenMP threads on two cores make the
# many small operations of these models many times slower than one thread each. More than two
# threads gain these small models nothing.
WORKERS = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
THREADS = max(1, min(2, len(os.sched_getaffinity(0)) // WORKERS))
if WORKERS > 1:
    os.environ.setdefault('OMP_NUM_THREADS', str(THREADS))

import torch  # noqa: E402  (after the thread count, which OpenMP reads when torch loads it)

pytest_plugins = ['tests.durations_record']

# Triton kernels are tested on CPU tensors through the interpreter where there is no GPU; it must
# be chosen before any kernel is defined, hence here and not in the tests. With a GPU they run
# compiled, on CUDA tensors (`make test` sets the interpreter only where there is no GPU).
if not torch.cuda.is_available():
    os.environ.setdefault('TRITON_INTERPRET', '1')
# cuBLAS under torch.use_deterministic_algorithms(True) (tests/test_ops/test_determinism.py) needs a
# fixed workspace, read when CUDA starts
os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')

# before any test module imports mmdet's or mmseg's models: they import mmpretrain, hence
# torchvision, which imports beside a CPU torch only after mmvisattn's patch
# (compat.import_torchvision_without_its_ops)
import mmvisattn  # noqa: E402,F401

# the suite runs the tools' code: with the tools' patches
if importlib.util.find_spec('mmengine') is not None:
    mmvisattn.compat.apply_tool_patches()

REPO = Path(__file__).resolve().parents[1]
# every model config: configs/<family>/*.py, not the bases nor mmdeploy's deploy configs
# (configs/_deploy_/)
MODEL_CONFIGS = sorted(path for path in (REPO / 'configs').rglob('*.py')
                       if not {'_base_', '_deploy_'} & set(path.parts))


LAB_TESTS = Path(__file__).resolve().parent / 'lab'


def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    """Every test of ``tests/lab`` marked ``lab``; tests marked ``starts_first`` first (the order is
    otherwise kept): pytest-xdist hands tests out in this order, so a long one overlaps the rest of
    the suite on its worker instead of ending it alone."""
    for item in items:
        if Path(str(item.fspath)).is_relative_to(LAB_TESTS):
            item.add_marker(pytest.mark.lab)
    items.sort(key=lambda item: item.get_closest_marker('starts_first') is None)

# Every test of an op or attention that takes the `device` fixture runs on each of these.
DEVICES = ['cpu'] + (['cuda'] if torch.cuda.is_available() else [])
# Where the Triton kernels run: compiled on CUDA, or interpreted on CPU tensors without a GPU.
KERNEL_DEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')


def release(version: str) -> Tuple[int, int]:
    """``(major, minor)`` of a version string such as ``'2.6.0+cu124'``, to compare with a
    release."""
    major, minor = version.split('+')[0].split('.')[:2]
    return int(major), int(minor)


# The kernels' float64 gradchecks (their hand-written backwards, under the interpreter) need float64
# operands of `tl.dot`, which Triton takes from 3.5 on (the oldest torch of the range, 2.6, comes
# with Triton 3.2).
TRITON_VERSION = (
    importlib.metadata.version('triton') if importlib.util.find_spec('triton') else None
)
float64_dot = pytest.mark.skipif(TRITON_VERSION is not None and release(TRITON_VERSION) < (3, 5),
                                 reason=f"Triton {TRITON_VERSION}'s tl.dot takes no float64 "
                                 "operands "
                                        '(Triton 3.5 and later do)')

# Tolerances of float32 results against a float64 reference (or another float32 path), by how the
# products were computed:
# - exact float32 products (CPU; CUDA matmuls with TF32 off, torch's default for matmul);
EXACT_FLOAT32 = dict(rtol=1e-4, atol=1e-5)
# - TF32 products: Triton's float32 `tl.dot` on Ampere and Hopper rounds the operands to 10-bit
#   mantissas (relative error 2^-11 per operand, growing with the reduction length);
TF32 = dict(rtol=1e-2, atol=2e-3)
# - float16 / bfloat16 inputs (8-bit mantissa for bfloat16), float32 accumulation.
HALF = dict(rtol=2e-2, atol=2e-2)


def kernel_tolerance(device: torch.device, dtype: torch.dtype = torch.float32) -> dict:
    """The tolerance of a Triton kernel's result on ``device`` for inputs of ``dtype``: half inputs
    :data:`HALF`; float32 :data:`TF32` where the kernels run compiled on a GPU (TF32 tensor-core
    products), :data:`EXACT_FLOAT32` under the interpreter (numpy's float32 products)."""
    if dtype in (torch.float16, torch.bfloat16):
        return HALF
    return TF32 if torch.device(device).type == 'cuda' else EXACT_FLOAT32


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """Each device of :data:`DEVICES`: the CPU, and CUDA where there is a GPU."""
    return torch.device(request.param)


def tool_env() -> dict:
    """The environment of a tool subprocess: this interpreter's venv first on PATH, and this
    interpreter the launch scripts' ``PYTHON`` (tools/pick_python.sh would take the checkout's
    .venv, not .venv-oldest)."""
    env = dict(os.environ, PYTHON=sys.executable)
    env['PATH'] = f'{Path(sys.executable).parent}{os.pathsep}{env.get("PATH", "")}'
    env.setdefault('OMP_NUM_THREADS', str(THREADS))
    return env


# Every subprocess limit of the suite is multiplied by this variable (default 1): a loaded or slow
# machine sets, say, MMVISATTN_TEST_TIMEOUT_SCALE=4 instead of failing on a fixed limit.
TIMEOUT_SCALE_VARIABLE = 'MMVISATTN_TEST_TIMEOUT_SCALE'


def time_limit(seconds: float) -> float:
    """``seconds`` scaled by ``$MMVISATTN_TEST_TIMEOUT_SCALE``."""
    text = os.environ.get(TIMEOUT_SCALE_VARIABLE, '1')
    try:
        scale = float(text)
    except ValueError:
        raise pytest.UsageError(f'{TIMEOUT_SCALE_VARIABLE}={text!r} is not a number') from None
    return seconds * scale


def run_command(command: List[str], timeout: float = 600, forked: bool = False,
                **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(command, capture_output=True, text=True)`` under the scaled ``timeout``
    (``forked``: a ``python script`` command forked from :data:`TOOLS`, given ``cwd`` and ``env``);
    a time-out fails the test with one line naming the command and the limit."""
    limit = time_limit(timeout)
    try:
        if forked:
            return TOOLS.run(command, limit, **kwargs)
        return subprocess.run(command, capture_output=True, text=True, timeout=limit, **kwargs)
    except subprocess.TimeoutExpired:
        pytest.fail(f'{" ".join(map(str, command))} did not finish within {limit:g} s ({timeout:g} '
                    f's x {TIMEOUT_SCALE_VARIABLE}={os.environ.get(TIMEOUT_SCALE_VARIABLE, "1")}); '
                    f'on a slow or loaded machine raise {TIMEOUT_SCALE_VARIABLE}', pytrace=False)


# Tools run forked from a server that has imported the stock stack (lab/tool_server.py
# says what that changes, and what not); MMVISATTN_TEST_FRESH_TOOLS=1 starts a new interpreter for
# each instead, as does a machine without OpenMMLab (the op tests on a bare GPU machine).
FORK_TOOLS = os.environ.get('MMVISATTN_TEST_FRESH_TOOLS',
                            '0') == '0' and importlib.util.find_spec('mmdet') is not None
if FORK_TOOLS:
    from lab.tool_server import ToolServer
TOOLS = ToolServer(tool_env) if FORK_TOOLS else None


def run_tool(args: List[str], cwd: Path, timeout: float = 600,
             check: bool = True) -> subprocess.CompletedProcess:
    """Run ``python <repo>/<args[0]> args[1:]`` in ``cwd``; on failure show its output."""
    command = [sys.executable, str(REPO / args[0]), *map(str, args[1:])]
    env = tool_env()
    done = run_command(command, timeout, forked=FORK_TOOLS and TOOLS.serves(env), cwd=cwd, env=env)
    if check and done.returncode != 0:
        pytest.fail(f'{" ".join(command)} exited {done.returncode}\n--- '
                    f'stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-6000:]}')
    return done


def load_tool(path: str):
    """The module of the tool script ``path`` (relative to the repository), to call its functions.
    Its folder is on ``sys.path`` while it loads, as when the script runs, so it imports its
    siblings."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, REPO / path)
    module = importlib.util.module_from_spec(spec)
    folder = str((REPO / path).parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    return module


@pytest.fixture(scope='session')
def workspace(tmp_path_factory) -> Path:
    """A working directory holding ``data/shapes`` (the demo data at its default size), as the
    configs' relative data roots expect."""
    root = tmp_path_factory.mktemp('workspace')
    run_tool(['tools/misc/make_demo_data.py', '--out', root / 'data' / 'shapes'], cwd=root)
    return root


def running_reference(op, reference):
    """Inside, every call of ``op`` runs ``reference`` (a function of the backends' arguments): a
    module's output with its op's reference in place, to compare with."""
    from mmvisattn.ops.utils.dispatch import observing
    return observing(lambda called, impl, request: reference if called is op else None)


@pytest.fixture
def machine(monkeypatch):
    """Sets what the ops read of the machine (:mod:`mmvisattn.ops.utils.machine`) for one test:
    ``machine(triton=(3, 6), capability=(7, 5), interpreted=True)``; a fact left out stays this
    machine's."""
    from mmvisattn.ops.utils import machine as facts
    functions = dict(triton='installed_triton', capability='cuda_capability',
                     interpreted='triton_interpreted')

    def assume(**values) -> None:
        for name, value in values.items():
            monkeypatch.setattr(facts, functions[name], lambda value=value: value)
    return assume


def saved_elements(fn) -> int:
    """Elements autograd saves for the backward while ``fn()`` runs (each storage counted once)."""
    from lab.bench.saved_tensors import saved_for_backward
    return saved_for_backward(fn, in_elements=True)
