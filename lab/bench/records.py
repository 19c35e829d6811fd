"""What every measurement run writes: its record as data, one JSON file per run, stamped with the
machine, the software versions and the commit of this tree. The GPU proofs (``proof``, ``models``,
:func:`record`) and the CPU benchmarks (:func:`cpu_record`) write one into their output folder as
``record_<kind>.json``; a maintainer commits it under its ``name`` in the repository's
``docs/records/<kind>/``, where the docs build renders its tables.

A record is named ``<date>_<machine>_<commit>_<kind>.json``. The commit is the one of the git work tree
the package was imported from (an editable install); ``$MMVISATTN_COMMIT`` and ``$MMVISATTN_DIRTY`` (``0``
for a clean tree), where set, say what the tree is a copy of (a lent GPU machine's copy may carry another
``.git`` or none); an installed package outside any work tree records ``unknown`` and its version in
``software``.

GPU records hold ``gpu``, ``date``, ``software`` (torch, CUDA, Triton, Python and, for models, the
OpenMMLab packages), ``commit``, ``dirty`` and ``rows``, one schema per kind:

* ``proof`` (``gpu_proof.py``'s benchmark section): ``op``, ``layer`` (the names of
  :data:`lab.proof.cases.CASES`), ``impl`` (``"sdpa"`` for the baseline), ``auto`` (true on
  auto's choice), ``forward_ms``, ``forward_backward_ms``, ``peak_mb``; and ``crossovers`` (its crossover
  sweep): ``op``, ``tokens``, ``impl``, ``dense`` (true on the dense form), ``forward_backward_ms``;
* ``models`` (``gpu_proof_models.py``): ``model``, ``stock`` (true for the counterpart),
  ``step_ms``, ``peak_mb``, ``test_images_s``, ``largest_input``.

A record may carry ``invalid`` (fields of its rows known to be wrong) and ``notes``.
"""
import json
import os
import platform
import re
import subprocess
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import mmvisattn

PACKAGE = Path(mmvisattn.__file__).resolve().parent
PROOF_FIELDS = ('op', 'layer', 'impl', 'auto', 'forward_ms', 'forward_backward_ms', 'peak_mb')
MODEL_FIELDS = ('model', 'stock', 'step_ms', 'peak_mb', 'test_images_s', 'largest_input')


def git(*command: str) -> str:
    """git's answer about the work tree the package was imported from ('' outside one)."""
    result = subprocess.run(['git', *command], cwd=PACKAGE, capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else ''


def software(openmmlab: bool) -> Dict[str, Optional[str]]:
    """Versions of what the run used (the OpenMMLab packages for model runs)."""
    import torch
    from mmvisattn.ops.utils.dispatch import INSTALLED_TRITON as found
    versions = dict(mmvisattn=mmvisattn.__version__, torch=torch.__version__, cuda=torch.version.cuda,
                    python=platform.python_version(), triton='.'.join(map(str, found)) if found else None)
    if openmmlab:
        for name in ('mmcv', 'mmengine', 'mmdet', 'mmseg'):
            versions[name] = __import__(name).__version__
    return versions


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


def record(kind: str, gpu: str, rows: Sequence[Dict], openmmlab: bool,
           crossovers: Optional[Sequence[Dict]] = None) -> Dict:
    """A record of this tree's run: ``name`` is the file name it is committed under; a proof's
    ``crossovers`` (:func:`crossover_rows`) are kept beside its rows."""
    commit, dirty = tree_state()
    today = date.today().isoformat()
    fields = PROOF_FIELDS if kind == 'proof' else MODEL_FIELDS
    missing = [f'{field} (row {i})' for i, row in enumerate(rows) for field in fields if field not in row]
    if missing:
        raise ValueError(f'{kind} record rows lack {missing[0]}')
    data = dict(name=f'{today}_{slug(gpu)}_{commit}_{kind}.json', kind=kind, gpu=gpu, date=today,
                software=software(openmmlab), commit=commit, dirty=dirty, rows=list(rows))
    return dict(data, crossovers=list(crossovers)) if crossovers is not None else data


def cpu_machine() -> Dict:
    """The processor's name (``/proc/cpuinfo``'s, else ``platform.processor()``), the cores this process
    may use and the Python version: what a CPU record (and the suite's, ``tests/durations_record.py``)
    says it ran on."""
    try:
        name = next(line.split(':', 1)[1].strip() for line in Path('/proc/cpuinfo').read_text().splitlines()
                    if line.startswith('model name'))
    except (OSError, StopIteration):
        name = platform.processor() or 'unknown CPU'
    return dict(cpu=name, cores=len(os.sched_getaffinity(0)), python=platform.python_version())


def cpu_record(kind: str, results: Dict) -> Dict:
    """A record of this tree's CPU benchmark: ``results`` as the tool wrote them, stamped with the machine
    (processor, the cores this process may use, Python, torch), the date, the UTC time and the commit;
    ``name`` is the file name it is committed under in ``docs/records/<kind>/``."""
    import torch
    commit, dirty = tree_state()
    now = datetime.now(timezone.utc)
    machine = dict(cpu_machine(), torch=torch.__version__)
    return dict(name=f'{now.date().isoformat()}_{slug(machine["cpu"])}-{machine["cores"]}-cores_{commit}_{kind}.json',
                kind=kind, date=now.date().isoformat(), time=now.strftime('%H:%M:%SZ'), commit=commit, dirty=dirty,
                machine=machine, results=results)


def write_cpu_record(record: Dict, out_dir: Path, record_dir: Optional[Path]) -> List[Path]:
    """``record`` as ``record_<kind>.json`` in ``out_dir`` and, given ``record_dir``, under its ``name``
    there too (``make bench`` names ``docs/records/<kind>``); the paths written."""
    text = json.dumps(record, indent=1) + '\n'
    paths = [out_dir / f'record_{record["kind"]}.json'] + ([record_dir / record['name']] if record_dir else [])
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return paths
