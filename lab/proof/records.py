"""The GPU proof's judgement of its benchmark rows: the goals against SDPA (:data:`GOALS`), the rows
and crossover sweep in the record's schema (:mod:`lab.bench.records` writes the record)."""
from typing import Dict, List, NamedTuple, Sequence, Tuple

SDPA = 'sdpa'


class Goal(NamedTuple):
    """A goal against SDPA over the same tokens: at the ``layers`` (``(op, layer)`` as
    :data:`lab.proof.cases.CASES` names them), the implementations measured fastest in forward + backward,
    their ``field`` summed, at most ``at_most`` times the SDPA row of the first layer."""
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


def fastest_rows(data: Dict) -> Dict[Tuple[str, str], Dict]:
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


def goal_rows(data: Dict, goals: Sequence[Goal] = GOALS) -> List[Dict]:
    """Each goal judged on a proof record: ``goal``, ``impls``, ``ratio`` (ours over SDPA) and ``met``
    (``None`` for both where the record lacks a row or field the goal needs)."""
    fastest = fastest_rows(data)
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
                     f'{number(row["ratio"], 3)} | {row["at_most"]:.3g} | {met} |')
    return lines


def number(value, digits: int = 2) -> str:
    return '-' if value is None else f'{value:,.{digits}f}'


def shown(data: Dict, row: Dict, field: str):
    """A row's field, or None where the record says the field is invalid."""
    return None if field in data.get('invalid', ()) else row[field]
