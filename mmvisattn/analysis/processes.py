"""Child processes of the analysis tools and the lab: a command run with its output in a log, a
failure reported as the one line that says what failed."""
import subprocess
from pathlib import Path
from typing import Dict, Optional, Sequence


def failure_line(text: str) -> str:
    """What a failed command said, in one line: its ``error:`` line, else its last line naming an
    error, else its last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    said = [line for line in lines if line.startswith('error:')] or \
        [line for line in lines if 'Error' in line or 'error:' in line]
    return (said or lines or ['(no output)'])[-1][:400]


def run_logged(command: Sequence, log: Path, env: Optional[Dict[str, str]] = None,
               timeout: Optional[float] = None) -> Optional[str]:
    """``command`` in a child process, output into ``log``; ``None``, or one line saying why not."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, 'w') as stream:
        try:
            code = subprocess.run([str(part) for part in command], stdout=stream,
                                  stderr=subprocess.STDOUT, env=env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return f'timeout after {timeout:.0f} s (log: {log})'
    if not code:
        return None
    text = log.read_text()
    return f'{failure_line(text) if text.strip() else f"exit code {code}"} (log: {log})'
