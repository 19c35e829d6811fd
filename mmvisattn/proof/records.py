"""The records of runs as data: one JSON file per run under ``docs/records/<kind>/``, and the tables
generated from them by the docs build, never written by hand. GPU runs under ``docs/records/gpu/``;
the CPU benchmarks (``make bench``, ``make bench-models``) under ``docs/records/bench/`` and
``docs/records/bench_models/`` (:func:`cpu_record`).

    python tools/analysis_tools/gpu_records.py [--records docs/records/gpu]    # prints the tables

A record is named ``<date>_<gpu>_<commit>_<proof|models>.json`` and holds ``gpu``, ``date``,
``software`` (torch, CUDA, Triton, Python and, for models, the OpenMMLab packages), ``commit``,
``dirty`` (whether the tree had uncommitted changes) and ``rows``, one schema per kind:

* ``proof`` (``gpu_proof.py``'s benchmark section): ``op``, ``layer`` (the names of
  :data:`mmvisattn.proof.cases.FASTEST_ON_CUDA`), ``impl`` (``"sdpa"`` for the baseline), ``auto`` (true on
  auto's choice), ``forward_ms``, ``forward_backward_ms``, ``peak_mb``; and ``crossovers`` (its crossover
  sweep): ``op``, ``tokens``, ``impl``, ``dense`` (true on the dense form), ``forward_backward_ms``;
* ``models`` (``gpu_proof_models.py``): ``model``, ``stock`` (true for the counterpart),
  ``step_ms``, ``peak_mb``, ``test_images_s``, ``largest_input``.

``$MMVISATTN_COMMIT`` and ``$MMVISATTN_DIRTY`` (``0`` for a clean tree), where set, say what the tree
is a copy of (a lent GPU machine's copy may carry another ``.git`` or none). A record may carry
``invalid`` (fields of its rows known to be wrong, shown as ``-``) and ``notes`` (shown under its
table). The tools write their record into their output folder (``record_proof.json``,
``record_models.json``); committing it is copying it here under its ``name``. The docs build renders the tables
(``docs/records/gpu.md``); the tool prints them.
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[2]
KINDS = ('proof', 'models')
PROOF_FIELDS = ('op', 'layer', 'impl', 'auto', 'forward_ms', 'forward_backward_ms', 'peak_mb')
MODEL_FIELDS = ('model', 'stock', 'step_ms', 'peak_mb', 'test_images_s', 'largest_input')
SDPA = 'sdpa'


class Goal(NamedTuple):
    """A goal against SDPA over the same tokens: at the ``layers`` (``(op, layer)`` as
    :data:`mmvisattn.proof.cases.FASTEST_ON_CUDA` names them), the implementations measured fastest in
    forward + backward (those ``auto`` follows), their ``field`` summed, at most ``at_most`` times the
    SDPA row of the first layer."""
    name: str
    layers: Tuple[Tuple[str, str], ...]
    field: str
    at_most: float


_VIL = 'sliding_chunk_attention'
_CASTLING = (('linear_angular_attention', 'Castling ViT-B at 512x512'),)
_PERVIT = (('peripheral_attention', 'PerViT-T stage 3 at 800x1344'),)
# At or ahead of FlashAttention at the shipped sizes (bfloat16; SDPA's flash backend is the baseline)
GOALS = (
    Goal('ViL-S stage 1: 30x faster than SDPA', ((_VIL, 'ViL-S stage 1 at 800x1344'),), 'forward_backward_ms', 1 / 30),
    Goal('ViL-S stage 2: no slower than SDPA', ((_VIL, 'ViL-S stage 2'),), 'forward_backward_ms', 1.0),
    Goal('ViL-S stage 3: no slower than SDPA', ((_VIL, 'ViL-S stage 3'),), 'forward_backward_ms', 1.0),
    Goal('SMCA-Ripple 25x42: within 1.5x of SDPA', (('ripple_attention', 'SMCA-Ripple encoder at 800x1344'),),
         'forward_backward_ms', 1.5),
    Goal('Castling 32x32, deploy: forward no slower than SDPA', _CASTLING, 'forward_ms', 1.0),
    Goal('Castling 32x32: within 2x of SDPA', _CASTLING, 'forward_backward_ms', 2.0),
    Goal('Castling 32x32, training form (both branches): within 3x of SDPA',
         (*_CASTLING, ('masked_softmax_attention', 'Castling ViT-B auxiliary branch at 512x512')),
         'forward_backward_ms', 3.0),
    Goal('PerViT-T 50x84: within 1.3x of SDPA', _PERVIT, 'forward_backward_ms', 1.3),
    Goal("PerViT-T 50x84: peak memory at most 2x SDPA's", _PERVIT, 'peak_mb', 2.0),
)


def git(*command: str) -> str:
    result = subprocess.run(['git', *command], cwd=REPO, capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else ''


def software(openmmlab: bool) -> Dict[str, Optional[str]]:
    """Versions of what the run used (the OpenMMLab packages for model runs)."""
    import torch
    from mmvisattn.ops.utils.dispatch import triton_version
    found = triton_version()
    versions = dict(torch=torch.__version__, cuda=torch.version.cuda, python=platform.python_version(),
                    triton='.'.join(map(str, found)) if found else None)
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


def cpu_stamp(record: Dict) -> str:
    """The line above a CPU record's tables: what ran it, when, on which commit."""
    machine = record['machine']
    return (f'Measured {record["date"]} at {record["time"]}, commit `{record["commit"]}`'
            f'{" (with uncommitted changes)" if record["dirty"] else ""}; {machine["cpu"]} with {machine["cores"]} '
            f'cores, Python {machine["python"]}, torch {machine["torch"]}.')


def cpu_records(records_dir: Path) -> List[Dict]:
    """The records under ``records_dir`` (none where it does not exist), the newest first (by date and UTC
    time, then name)."""
    records = [json.loads(path.read_text()) for path in records_dir.glob('*.json')]
    return sorted(records, key=lambda record: (record['date'], record['time'], record['name']), reverse=True)


def proof_rows(sections: Dict[str, Dict], baseline: str) -> List[Dict]:
    """The benchmark rows of ``gpu_proof.py`` in the record's schema (skipped and failed rows left out);
    ``baseline`` is its label of the SDPA rows."""
    rows = []
    for row in sections.get('benchmarks', {}).get('rows', []):
        if 'forward_backward_ms' not in row:
            continue
        impl = SDPA if row['impl'] == baseline else row['impl']
        rows.append(dict(op=row['op'], layer=row['layer'], impl=impl, auto=bool(row.get('auto')),
                         forward_ms=row.get('forward_ms'), forward_backward_ms=row['forward_backward_ms'],
                         peak_mb=row.get('peak_mb'), size=row.get('size')))
    return rows


def newest(records_dir: Path, kind: str) -> List[Dict]:
    """The newest record of ``kind`` of each GPU (by date, then name), GPUs in name order."""
    by_gpu: Dict[str, Dict] = {}
    for path in sorted(records_dir.glob(f'*_{kind}.json')):
        data = json.loads(path.read_text())
        if data['gpu'] not in by_gpu or (data['date'], path.name) >= (by_gpu[data['gpu']]['date'],
                                                                       by_gpu[data['gpu']]['_file']):
            by_gpu[data['gpu']] = dict(data, _file=path.name)
    return [by_gpu[gpu] for gpu in sorted(by_gpu)]


def _fastest_rows(data: Dict) -> Dict[Tuple[str, str], Dict]:
    """``(op, layer) -> row``: each layer's row of least forward + backward time (SDPA left out); none
    where the record marks that time invalid."""
    fastest: Dict[Tuple[str, str], Dict] = {}
    if 'forward_backward_ms' in data.get('invalid', ()):
        return fastest
    for row in data['rows']:
        key, time = (row['op'], row['layer']), row.get('forward_backward_ms')
        if row['impl'] != SDPA and time is not None and (key not in fastest or
                                                         time < fastest[key]['forward_backward_ms']):
            fastest[key] = row
    return fastest


def measured_fastest(records: Sequence[Dict]) -> Dict[Tuple[str, str], Dict]:
    """``(op, layer) -> {impl, gpu, date}``: each op's own fastest implementation at each layer
    (least forward + backward time, SDPA left out) in the newest of ``records`` that times the layer
    (:func:`newest`'s records; where GPUs disagree, the newest record wins)."""
    fastest: Dict[Tuple[str, str], Dict] = {}
    for data in sorted(records, key=lambda data: (data['date'], data.get('_file', ''))):
        fastest.update({key: dict(impl=row['impl'], gpu=data['gpu'], date=data['date'])
                        for key, row in _fastest_rows(data).items()})
    return fastest


def crossover_rows(sections: Dict[str, Dict]) -> List[Dict]:
    """The crossover sweep of ``gpu_proof.py`` in the record's schema (skipped and failed rows left out)."""
    return [dict(op=row['op'], tokens=row['tokens'], impl=row['impl'], dense=row['dense'],
                 forward_backward_ms=row['forward_backward_ms'])
            for row in sections.get('crossovers', {}).get('rows', []) if 'forward_backward_ms' in row]


def measured_crossovers(rows: Sequence[Dict]) -> Dict[str, int]:
    """``{op: tokens}``: the largest swept size up to which the dense form was faster than the other
    implementation at every size (0 where it lost at the smallest; ops swept at no size left out)."""
    times: Dict[str, Dict[int, Dict[bool, float]]] = {}
    for row in rows:
        times.setdefault(row['op'], {}).setdefault(row['tokens'], {})[row['dense']] = row['forward_backward_ms']
    found = {}
    for op, sizes in times.items():
        found[op] = 0
        for tokens in sorted(sizes):
            dense, other = sizes[tokens].get(True), sizes[tokens].get(False)
            if dense is None or other is None or dense >= other:
                break
            found[op] = tokens
    return found


def unrecorded_crossovers(rows: Sequence[Dict], table: Dict[str, Dict[str, int]], gpu: str) -> List[str]:
    """A line per op whose crossover measured on ``gpu`` differs from ``table``'s
    (:data:`~mmvisattn.ops.utils.crossover.CUDA_DENSE_CROSSOVERS`, which auto follows)."""
    return [f'{op} on {gpu}: the dense form faster up to {tokens} tokens; CUDA_DENSE_CROSSOVERS says '
            f'{table.get(op, {}).get(gpu)}' for op, tokens in sorted(measured_crossovers(rows).items())
            if table.get(op, {}).get(gpu) != (tokens or None)]


def crossover_disagreements(records_dir: Path, table: Dict[str, Dict[str, int]]) -> List[str]:
    """:func:`unrecorded_crossovers` of the newest proof record of each GPU that swept them."""
    return [line for data in newest(records_dir, 'proof') if data.get('crossovers')
            for line in unrecorded_crossovers(data['crossovers'], table, data['gpu'])]


def auto_disagreements(records_dir: Path, fastest_on_cuda: Dict[Tuple[str, str], str]) -> List[str]:
    """A line per layer where the newest proof records measured another fastest implementation than
    ``fastest_on_cuda`` (:data:`mmvisattn.proof.cases.FASTEST_ON_CUDA`, which auto's CUDA order follows)."""
    return [f'{op} at {layer}: {found["impl"]} measured fastest on {found["gpu"]} ({found["date"]}); '
            f'FASTEST_ON_CUDA says {fastest_on_cuda.get((op, layer))}'
            for (op, layer), found in sorted(measured_fastest(newest(records_dir, 'proof')).items())
            if fastest_on_cuda.get((op, layer)) != found['impl']]


def goal_rows(data: Dict, goals: Sequence[Goal] = GOALS) -> List[Dict]:
    """Each goal judged on a proof record: ``goal``, ``impls``, ``ratio`` (ours over SDPA) and ``met``
    (``None`` for both where the record lacks a row or field the goal needs)."""
    fastest = _fastest_rows(data)
    sdpa = {(row['op'], row['layer']): row for row in data['rows'] if row['impl'] == SDPA}
    judged = []
    for goal in goals:
        ours, baseline = [fastest.get(layer) for layer in goal.layers], sdpa.get(goal.layers[0])
        row = dict(goal=goal.name, impls=[None if r is None else r['impl'] for r in ours], at_most=goal.at_most,
                   ratio=None, met=None)
        values = [None if r is None else shown(data, r, goal.field) for r in ours]
        base = None if baseline is None else shown(data, baseline, goal.field)
        if None not in values and base:
            row['ratio'] = sum(values) / base
            row['met'] = row['ratio'] <= goal.at_most
        judged.append(row)
    return judged


def goals_table(data: Dict) -> List[str]:
    lines = ['', 'Goals against SDPA (the implementations measured fastest in forward + backward):', '',
             '| goal | implementation | ours / SDPA | at most | met |', '|---|---|---|---|---|']
    for row in goal_rows(data):
        met = '-' if row['met'] is None else ('yes' if row['met'] else 'no')
        lines.append(f'| {row["goal"]} | {" + ".join(impl or "-" for impl in row["impls"])} | '
                     f'{_num(row["ratio"], 3)} | {row["at_most"]:.3g} | {met} |')
    return lines


def _num(value, digits: int = 2) -> str:
    return '-' if value is None else f'{value:,.{digits}f}'


def shown(data: Dict, row: Dict, field: str):
    """A row's field, or None where the record says the field is invalid."""
    return None if field in data.get('invalid', ()) else row[field]


def notes(data: Dict) -> List[str]:
    return [''] + [f'- {note}' for note in data['notes']] if data.get('notes') else []


def proof_table(data: Dict) -> List[str]:
    lines = [f'**{data["gpu"]}**, {data["date"]}, commit {data["commit"]}{" (dirty)" if data["dirty"] else ""}; '
             f'torch {data["software"]["torch"]}, Triton {data["software"]["triton"]}. bfloat16; forward / '
             'forward + backward ms (CUDA-event medians), peak MB above the inputs; * auto\'s choice', '',
             '| op | layer | implementation | forward ms | fwd + bwd ms | peak MB |', '|---|---|---|---|---|---|']
    for row in data['rows']:
        impl = row['impl'] + (' *' if row['auto'] else '')
        lines.append(f'| {row["op"]} | {row["layer"]} | {impl} | {_num(shown(data, row, "forward_ms"))} | '
                     f'{_num(shown(data, row, "forward_backward_ms"))} | {_num(shown(data, row, "peak_mb"), 0)} |')
    return lines + goals_table(data) + notes(data)


def models_table(data: Dict) -> List[str]:
    lines = [f'**{data["gpu"]}**, {data["date"]}, commit {data["commit"]}{" (dirty)" if data["dirty"] else ""}; '
             f'torch {data["software"]["torch"]}, mmcv {data["software"].get("mmcv")}, mmdet '
             f'{data["software"].get("mmdet")}, mmseg {data["software"].get("mmseg")}. Through tools/train.py in '
             'float32 at the training size; step ms: median of the last 10 of 20 (synchronised)', '',
             '| model | stock | step ms | peak MB | test images/s | largest square input (batch 2) |',
             '|---|---|---|---|---|---|']
    for row in data['rows']:
        largest = shown(data, row, 'largest_input')
        lines.append(f'| {row["model"]} | {"yes" if row["stock"] else ""} | {_num(shown(data, row, "step_ms"), 1)} | '
                     f'{_num(shown(data, row, "peak_mb"), 0)} | {_num(shown(data, row, "test_images_s"), 1)} | '
                     f'{"-" if largest is None else largest} |')
    return lines + notes(data)


def tables(records_dir: Path) -> str:
    lines = []
    for kind, render, title in (('proof', proof_table, 'Ops (`make gpu-proof`)'),
                                ('models', models_table, 'Whole models (`make gpu-proof-models`)')):
        found = newest(records_dir, kind)
        lines += [f'## {title}', '']
        if not found:
            lines += ['No record yet.', '']
        for data in found:
            lines += render(data) + ['']
    return '\n'.join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--records', type=Path, default=REPO / 'docs' / 'records' / 'gpu')
    args = parser.parse_args(argv)
    print(tables(args.records), end='')
    return 0


if __name__ == '__main__':
    sys.exit(main())
