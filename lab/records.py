"""The lab's records: what every measurement run writes, how the GPU proof judges its rows, and the
tables the docs (``docs/_ext/records.py``) and ``tools/analysis_tools/gpu_records.py`` render.

    python tools/analysis_tools/gpu_records.py [--records docs/records/gpu]    # prints the tables

A record is one JSON file per run, ``<date>_<machine>_<commit>_<kind>.json``, stamped with the
machine, software and commit (:func:`mmvisattn.analysis.records.cpu_record` for the CPU benchmarks,
:func:`record` for the GPU proofs); a maintainer commits it under ``docs/records/<kind>/``.

GPU records hold ``gpu``, ``date``, ``software``, ``commit``, ``dirty`` and ``rows``, per kind:

* ``proof``: ``op``, ``layer`` (:data:`lab.proof.cases.CASES`), ``impl`` (``"sdpa"`` for the
  baseline), ``auto``, ``forward_ms``, ``forward_backward_ms``, ``peak_mb``; and ``crossovers``:
  ``op``, ``tokens``, ``impl``, ``dense``, ``forward_backward_ms``;
* ``models``: ``model``, ``stock``, ``step_ms``, ``peak_mb``, ``test_images_s``, ``largest_input``.

A record may carry ``invalid`` (fields known to be wrong) and ``notes``.
"""
import argparse
import json
import platform
import sys
from datetime import date
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

PROOF_FIELDS = ('op', 'layer', 'impl', 'auto', 'forward_ms', 'forward_backward_ms', 'peak_mb')
MODEL_FIELDS = ('model', 'stock', 'step_ms', 'peak_mb', 'test_images_s', 'largest_input')


def software(openmmlab: bool) -> Dict[str, Optional[str]]:
    """Versions of what the run used (the OpenMMLab packages for model runs)."""
    import torch

    import mmvisattn
    from mmvisattn.ops.utils.machine import installed_triton
    found = installed_triton()
    versions = dict(mmvisattn=mmvisattn.__version__, torch=torch.__version__,
                    cuda=torch.version.cuda, python=platform.python_version(),
                    triton='.'.join(map(str, found)) if found else None)
    if openmmlab:
        for name in ('mmcv', 'mmengine', 'mmdet', 'mmseg'):
            versions[name] = __import__(name).__version__
    return versions


def record(kind: str, gpu: str, rows: Sequence[Dict], openmmlab: bool,
           crossovers: Optional[Sequence[Dict]] = None) -> Dict:
    """A record of this tree's run: ``name`` is the file name it is committed under; a proof's
    ``crossovers`` (:func:`crossover_rows`) are kept beside its rows."""
    from mmvisattn.analysis.records import slug, tree_state
    commit, dirty = tree_state()
    today = date.today().isoformat()
    fields = PROOF_FIELDS if kind == 'proof' else MODEL_FIELDS
    missing = [
        f'{field} (row {i})' for i, row in enumerate(rows) for field in fields if field not in row
    ]
    if missing:
        raise ValueError(f'{kind} record rows lack {missing[0]}')
    data = dict(name=f'{today}_{slug(gpu)}_{commit}_{kind}.json', kind=kind, gpu=gpu, date=today,
                software=software(openmmlab), commit=commit, dirty=dirty, rows=list(rows))
    return dict(data, crossovers=list(crossovers)) if crossovers is not None else data


SDPA = 'sdpa'


class Goal(NamedTuple):
    """A goal against SDPA: at ``layers`` (``(op, layer)``), the fastest implementations' ``field``
    summed is at most ``at_most`` times the first layer's SDPA row."""
    name: str
    layers: Tuple[Tuple[str, str], ...]
    field: str
    at_most: float


_VIL = 'sliding_chunk_attention'
_CASTLING = (('linear_angular_attention', 'Castling ViT-B at 512x512'),)
_PERVIT = (('peripheral_attention', 'PerViT-T stage 3 at 800x1344'),)
# at or ahead of FlashAttention at the shipped sizes (bfloat16, SDPA's flash backend)
GOALS = (
    Goal('ViL-S stage 1: 30x faster than SDPA', ((_VIL, 'ViL-S stage 1 at 800x1344'),),
         'forward_backward_ms', 1 / 30),
    Goal('ViL-S stage 2: no slower than SDPA', ((_VIL, 'ViL-S stage 2'),), 'forward_backward_ms',
         1.0),
    Goal('ViL-S stage 3: no slower than SDPA', ((_VIL, 'ViL-S stage 3'),), 'forward_backward_ms',
         1.0),
    Goal('SMCA-Ripple 25x42: within 1.5x of SDPA',
         (('ripple_attention', 'SMCA-Ripple encoder at 800x1344'),), 'forward_backward_ms', 1.5),
    Goal('Castling 32x32, deploy: forward no slower than SDPA', _CASTLING, 'forward_ms', 1.0),
    Goal('Castling 32x32: within 2x of SDPA', _CASTLING, 'forward_backward_ms', 2.0),
    Goal('Castling 32x32, training form (both branches): within 3x of SDPA',
         (*_CASTLING, ('masked_softmax_attention', 'Castling ViT-B auxiliary branch at 512x512')),
         'forward_backward_ms', 3.0),
    Goal('PerViT-T 50x84: within 1.3x of SDPA', _PERVIT, 'forward_backward_ms', 1.3),
    Goal("PerViT-T 50x84: peak memory at most 2x SDPA's", _PERVIT, 'peak_mb', 2.0),
)


def proof_rows(sections: Dict[str, Dict], baseline: str) -> List[Dict]:
    """The benchmark rows of ``gpu_proof.py`` in the record's schema (skipped and failed rows left
    out); ``baseline`` is its label of the SDPA rows."""
    rows = []
    for row in sections.get('benchmarks', {}).get('rows', []):
        if 'forward_backward_ms' not in row:
            continue
        impl = SDPA if row['impl'] == baseline else row['impl']
        rows.append(dict(op=row['op'], layer=row['layer'], impl=impl, auto=bool(row.get('auto')),
                         forward_ms=row.get('forward_ms'),
                         forward_backward_ms=row['forward_backward_ms'],
                         peak_mb=row.get('peak_mb'), size=row.get('size')))
    return rows


def crossover_rows(sections: Dict[str, Dict]) -> List[Dict]:
    """``gpu_proof.py``'s crossover sweep in the record's schema (skipped, failed rows left out)."""
    return [dict(op=row['op'], tokens=row['tokens'], impl=row['impl'], dense=row['dense'],
                 forward_backward_ms=row['forward_backward_ms'])
            for row in sections.get('crossovers', {}).get('rows', [])
            if 'forward_backward_ms' in row]


def measured_crossovers(rows: Sequence[Dict]) -> Dict[str, int]:
    """``{op: tokens}``: the largest swept size up to which the dense form beat the other at every
    size (0 if it lost at the smallest)."""
    times: Dict[str, Dict[int, Dict[bool, float]]] = {}
    for row in rows:
        times.setdefault(row['op'], {}).setdefault(row['tokens'],
                                                   {})[row['dense']] = row['forward_backward_ms']
    found = {}
    for op, sizes in times.items():
        found[op] = 0
        for tokens in sorted(sizes):
            dense, other = sizes[tokens].get(True), sizes[tokens].get(False)
            if dense is None or other is None or dense >= other:
                break
            found[op] = tokens
    return found


def fastest_rows(data: Dict) -> Dict[Tuple[str, str], Dict]:
    """``(op, layer) -> row``: each layer's row of least forward + backward time (SDPA left out);
    none where the record marks that time invalid."""
    fastest: Dict[Tuple[str, str], Dict] = {}
    if 'forward_backward_ms' in data.get('invalid', ()):
        return fastest
    for row in data['rows']:
        key, time = (row['op'], row['layer']), row.get('forward_backward_ms')
        if (
            row['impl'] != SDPA
            and time is not None
            and (key not in fastest or time < fastest[key]['forward_backward_ms'])
        ):
            fastest[key] = row
    return fastest


def goal_rows(data: Dict, goals: Sequence[Goal] = GOALS) -> List[Dict]:
    """Each goal judged on a proof record: ``goal``, ``impls``, ``ratio`` (ours over SDPA) and
    ``met`` (``None`` for both where the record lacks a row or field the goal needs)."""
    fastest = fastest_rows(data)
    sdpa = {(row['op'], row['layer']): row for row in data['rows'] if row['impl'] == SDPA}
    judged = []
    for goal in goals:
        ours, baseline = [fastest.get(layer) for layer in goal.layers], sdpa.get(goal.layers[0])
        row = dict(goal=goal.name, impls=[None if r is None else r['impl'] for r in ours],
                   at_most=goal.at_most, ratio=None, met=None)
        values = [None if r is None else shown(data, r, goal.field) for r in ours]
        base = None if baseline is None else shown(data, baseline, goal.field)
        if None not in values and base:
            row['ratio'] = sum(values) / base
            row['met'] = row['ratio'] <= goal.at_most
        judged.append(row)
    return judged


def goals_table(data: Dict) -> List[str]:
    lines = ['', 'Goals against SDPA (the implementations measured fastest in forward + backward):',
             '', '| goal | implementation | ours / SDPA | at most | met |', '|---|---|---|---|---|']
    for row in goal_rows(data):
        met = '-' if row['met'] is None else ('yes' if row['met'] else 'no')
        lines.append(f'| {row["goal"]} | {" + ".join(impl or "-" for impl in row["impls"])} | '
                     f'{number(row["ratio"], 3)} | {row["at_most"]:.3g} | {met} |')
    return lines


def number(value, digits: int = 2) -> str:
    return '-' if value is None else f'{value:,.{digits}f}'


def shown(data: Dict, row: Dict, field: str):
    """A row's field, or None where the record says the field is invalid."""
    return None if field in data.get('invalid', ()) else row[field]


def cpu_stamp(record: Dict) -> str:
    """The line above a CPU record's tables: what ran it, when, on which commit."""
    machine = record['machine']
    return (f'Measured {record["date"]} at {record["time"]}, commit `{record["commit"]}`'
            f'{" (with uncommitted changes)" if record["dirty"] else ""}; {machine["cpu"]} with '
            f'{machine["cores"]} cores, Python {machine["python"]}, torch {machine["torch"]}.')


def cpu_records(records_dir: Path) -> List[Dict]:
    """The records under ``records_dir`` (none where it does not exist), the newest first (by date
    and UTC time, then name)."""
    records = [json.loads(path.read_text()) for path in records_dir.glob('*.json')]
    return sorted(records, key=lambda record: (record['date'], record['time'], record['name']),
                  reverse=True)


def newest(records_dir: Path, kind: str) -> List[Dict]:
    """The newest record of ``kind`` of each GPU (by date, then name), GPUs in name order."""
    by_gpu: Dict[str, Dict] = {}
    for path in sorted(records_dir.glob(f'*_{kind}.json')):
        data = json.loads(path.read_text())
        if data['gpu'] not in by_gpu or (data['date'], path.name) >= (by_gpu[data['gpu']]['date'],
                                                                       by_gpu[data['gpu']]['_file']):
            by_gpu[data['gpu']] = dict(data, _file=path.name)
    return [by_gpu[gpu] for gpu in sorted(by_gpu)]


def notes(data: Dict) -> List[str]:
    return [''] + [f'- {note}' for note in data['notes']] if data.get('notes') else []


def proof_table(data: Dict) -> List[str]:
    lines = [f'**{data["gpu"]}**, {data["date"]}, commit '
             f'{data["commit"]}{" (dirty)" if data["dirty"] else ""}; torch '
             f'{data["software"]["torch"]}, Triton {data["software"]["triton"]}. bfloat16; forward '
             '/ forward + backward ms (CUDA-event medians), peak MB above the inputs; * auto\'s '
             'choice', '', '| op | layer | implementation | forward ms | fwd + bwd ms | peak MB |',
             '|---|---|---|---|---|---|']
    for row in data['rows']:
        impl = row['impl'] + (' *' if row['auto'] else '')
        lines.append(f'| {row["op"]} | {row["layer"]} | {impl} | '
                     f'{number(shown(data, row, "forward_ms"))} | '
                     f'{number(shown(data, row, "forward_backward_ms"))} | '
                     f'{number(shown(data, row, "peak_mb"), 0)} |')
    return lines + goals_table(data) + notes(data)


def models_table(data: Dict) -> List[str]:
    lines = [f'**{data["gpu"]}**, {data["date"]}, commit '
             f'{data["commit"]}{" (dirty)" if data["dirty"] else ""}; '
             f'torch {data["software"]["torch"]}, mmcv {data["software"].get("mmcv")}, mmdet '
             f'{data["software"].get("mmdet")}, mmseg {data["software"].get("mmseg")}. Through '
             'tools/train.py in '
             'float32 at the training size; step ms: median of the last 10 of 20 (synchronised)',
             '',
             '| model | stock | step ms | peak MB | test images/s | largest square input (batch 2) '
             '|', '|---|---|---|---|---|---|']
    for row in data['rows']:
        largest = shown(data, row, 'largest_input')
        lines.append(f'| {row["model"]} | {"yes" if row["stock"] else ""} | '
                     f'{number(shown(data, row, "step_ms"), 1)} | '
                     f'{number(shown(data, row, "peak_mb"), 0)} | '
                     f'{number(shown(data, row, "test_images_s"), 1)} | '
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
    parser.add_argument('--records', type=Path, default=Path('docs/records/gpu'))
    args = parser.parse_args(argv)
    print(tables(args.records), end='')
    return 0


if __name__ == '__main__':
    sys.exit(main())
