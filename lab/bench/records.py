"""What every measurement run writes: its record as data, one JSON file per run, stamped with the
machine, the software versions and the commit of this tree. The GPU proofs (``proof``, ``models``,
:func:`record`) and the CPU benchmarks (:func:`cpu_record`, shared with the user's tools from
:mod:`mmvisattn.analysis.records`) write one into their output folder as
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
import platform
from datetime import date
from typing import Dict, Optional, Sequence

import mmvisattn
from mmvisattn.analysis.records import cpu_machine, cpu_record, slug, tree_state, write_cpu_record  # noqa: F401

PROOF_FIELDS = ('op', 'layer', 'impl', 'auto', 'forward_ms', 'forward_backward_ms', 'peak_mb')
MODEL_FIELDS = ('model', 'stock', 'step_ms', 'peak_mb', 'test_images_s', 'largest_input')


def software(openmmlab: bool) -> Dict[str, Optional[str]]:
    """Versions of what the run used (the OpenMMLab packages for model runs)."""
    import torch
    from mmvisattn.ops.utils.machine import installed_triton
    found = installed_triton()
    versions = dict(mmvisattn=mmvisattn.__version__, torch=torch.__version__, cuda=torch.version.cuda,
                    python=platform.python_version(), triton='.'.join(map(str, found)) if found else None)
    if openmmlab:
        for name in ('mmcv', 'mmengine', 'mmdet', 'mmseg'):
            versions[name] = __import__(name).__version__
    return versions


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


