"""Each measurement in a process of its own: ``python args`` started as a user starts it, or by the
runner ``$MMVISATTN_PYTHON_RUNNER`` names (``module:function``; the test suite's forks from a
process with the stack imported). :func:`run_or_raise` runs a command with its output in a log
(:mod:`mmvisattn.analysis.processes`)."""
import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence

from mmvisattn.analysis.processes import run_logged

RUNNER_VARIABLE = 'MMVISATTN_PYTHON_RUNNER'


def run_python(args: Sequence[str], timeout: Optional[float] = None,
               env: Optional[Dict[str, str]] = None, cwd: Optional[Path] = None,
               output: Optional[Path] = None) -> subprocess.CompletedProcess:
    """``python args`` in ``cwd`` and ``env``, output captured as text or written to ``output``
    (then None); ``subprocess.TimeoutExpired`` past ``timeout``."""
    runner = os.environ.get(RUNNER_VARIABLE)
    if runner:
        module, _, name = runner.partition(':')
        function = getattr(importlib.import_module(module), name)
        return function(list(args), timeout=timeout, env=env, cwd=cwd, output=output)
    return run_fresh(args, timeout, env, cwd, output)


def run_fresh(args: Sequence[str], timeout: Optional[float] = None,
              env: Optional[Dict[str, str]] = None, cwd: Optional[Path] = None,
              output: Optional[Path] = None) -> subprocess.CompletedProcess:
    """:func:`run_python` in a new interpreter, whatever runner is named."""
    command = [sys.executable, *map(str, args)]
    if output is None:
        return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd,
                              timeout=timeout)
    with open(output, 'w') as out:
        return subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                              timeout=timeout)


def run_or_raise(command: Sequence, log: Path, label: Optional[str] = None) -> None:
    """``command`` in a child process, its output into ``log``; a failure raises its one line after
    ``label`` (default: the name of the script it ran)."""
    error = run_logged(command, log)
    if error:
        raise RuntimeError(f'{label or Path(str(command[1])).name}: {error}')
