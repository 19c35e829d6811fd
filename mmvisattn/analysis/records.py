"""The record a user's measurement run writes beside its results: one JSON file, stamped with the
machine, the date, the UTC time and the commit the package was imported from (``$MMVISATTN_COMMIT``
and ``$MMVISATTN_DIRTY`` name it for a copied tree), named
``<date>_<machine>_<commit>_<kind>.json``. The repository keeps its own under
``docs/records/<kind>/``, which the docs render."""
import json
import os
import platform
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional, Tuple

PACKAGE = Path(__file__).resolve().parents[1]


def git(*command: str) -> str:
    """git's answer about the work tree the package was imported from ('' outside one)."""
    result = subprocess.run(['git', *command], cwd=PACKAGE, capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else ''


def slug(text: str) -> str:
    return re.sub(r'[^A-Za-z0-9]+', '-', text).strip('-')


def tree_state() -> Tuple[str, bool]:
    """The commit this tree is (a copy of) and whether it differs from it: ``$MMVISATTN_COMMIT`` and
    ``$MMVISATTN_DIRTY`` where set, else git's answer; with neither, ``'unknown'`` and dirty."""
    head = git('rev-parse', '--short=12', 'HEAD')
    commit = os.environ.get('MMVISATTN_COMMIT') or head or 'unknown'
    if 'MMVISATTN_DIRTY' in os.environ:
        return commit, os.environ['MMVISATTN_DIRTY'] != '0'
    return commit, bool(git('status', '--porcelain')) if head else True


def cpu_machine() -> Dict:
    """The processor's name, the cores this process may use and the Python version."""
    try:
        name = next(
            line.split(':', 1)[1].strip()
            for line in Path('/proc/cpuinfo').read_text().splitlines()
            if line.startswith('model name')
        )
    except (OSError, StopIteration):
        name = platform.processor() or 'unknown CPU'
    return dict(cpu=name, cores=len(os.sched_getaffinity(0)), python=platform.python_version())


def cpu_record(kind: str, results: Dict, label: str = '') -> Dict:
    """``results`` stamped with the machine, date, UTC time and commit; ``name`` is its file name in
    ``docs/records/<kind>/`` (``label`` before the kind keeps one run per label)."""
    import torch
    commit, dirty = tree_state()
    now = datetime.now(timezone.utc)
    machine = dict(cpu_machine(), torch=torch.__version__)
    return dict(
        name=f'{now.date().isoformat()}_{slug(machine["cpu"])}-{machine["cores"]}-cores_{commit}_'
        f'{slug(label) + "_" if label else ""}{kind}.json', kind=kind, date=now.date().isoformat(),
        time=now.strftime('%H:%M:%SZ'), commit=commit, dirty=dirty, machine=machine,
        results=results,
    )


def write_cpu_record(record: Dict, out_dir: Path, record_dir: Optional[Path]) -> List[Path]:
    """``record`` as ``record_<kind>.json`` in ``out_dir`` and, given ``record_dir``, under its
    ``name`` there too (``make bench`` names ``docs/records/<kind>``); the paths written."""
    text = json.dumps(record, indent=1) + '\n'
    paths = [out_dir / f'record_{record["kind"]}.json'] + (
        [record_dir / record['name']] if record_dir else []
    )
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return paths
