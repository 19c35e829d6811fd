"""Each measurement in a process of its own: ``python args`` (a script or ``-m module``) started as
a user starts it, or by the runner ``$MMVISATTN_PYTHON_RUNNER`` names (``module:function``, called
with the arguments of :func:`run_python`). The repository's test suite names one there that forks
the children from a process that has imported the stock stack already, so that a short measurement
does not pay the imports each time; nothing in the package sets it. :func:`run_or_raise` runs a
command as given, its output kept in a log, a failure raised as its one line
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
    """``python args`` in ``cwd`` (default: this directory) and ``env`` (default: this one), its
    output captured as text, or both streams written to ``output`` (then reported as None); past
    ``timeout`` seconds ``subprocess.TimeoutExpired``."""
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
