"""Shared fixtures: the repository root, the demo data written once per session, and a runner
for the command-line tools as a user calls them (a subprocess in a scratch working directory)."""
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest
import torch

# Triton kernels are tested on CPU tensors through the interpreter where there is no GPU; it must
# be chosen before any kernel is defined, hence here and not in the tests.
if not torch.cuda.is_available():
    os.environ.setdefault('TRITON_INTERPRET', '1')

REPO = Path(__file__).resolve().parents[1]


def tool_env() -> dict:
    """The environment of a tool subprocess: this interpreter's venv first on PATH."""
    env = dict(os.environ)
    env['PATH'] = f'{Path(sys.executable).parent}{os.pathsep}{env.get("PATH", "")}'
    env.setdefault('OMP_NUM_THREADS', '2')
    return env


def run_tool(args: List[str], cwd: Path, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``python <repo>/<args[0]> args[1:]`` in ``cwd``; on failure show its output."""
    command = [sys.executable, str(REPO / args[0]), *map(str, args[1:])]
    done = subprocess.run(command, cwd=cwd, env=tool_env(), capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        pytest.fail(f'{" ".join(command)} exited {done.returncode}\n--- stdout\n{done.stdout[-4000:]}'
                    f'\n--- stderr\n{done.stderr[-6000:]}')
    return done


@pytest.fixture(scope='session')
def workspace(tmp_path_factory) -> Path:
    """A working directory holding ``data/shapes`` (the demo data at its default size), as the
    configs' relative data roots expect."""
    root = tmp_path_factory.mktemp('workspace')
    run_tool(['tools/misc/make_demo_data.py', '--out', root / 'data' / 'shapes'], cwd=root)
    return root
