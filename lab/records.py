"""The records' tables, as the docs build renders them (``docs/_ext/records.py``) and
``tools/analysis_tools/gpu_records.py`` prints them: the newest GPU record of each kind and GPU, the
CPU records newest first.
Their schema: :mod:`lab.bench.records`.

    python tools/analysis_tools/gpu_records.py [--records docs/records/gpu]    # prints the tables
"""
import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from lab.proof.records import goals_table, number, shown


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
    lines = [f'**{data["gpu"]}**, {data["date"]}, commit {data["commit"]}{" (dirty)" if data["dirty"] else ""}; '
             f'torch {data["software"]["torch"]}, Triton {data["software"]["triton"]}. bfloat16; forward / '
             'forward + backward ms (CUDA-event medians), peak MB above the inputs; * auto\'s choice', '',
             '| op | layer | implementation | forward ms | fwd + bwd ms | peak MB |', '|---|---|---|---|---|---|']
    for row in data['rows']:
        impl = row['impl'] + (' *' if row['auto'] else '')
        lines.append(f'| {row["op"]} | {row["layer"]} | {impl} | {number(shown(data, row, "forward_ms"))} | '
                     f'{number(shown(data, row, "forward_backward_ms"))} | {number(shown(data, row, "peak_mb"), 0)} |')
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
        lines.append(f'| {row["model"]} | {"yes" if row["stock"] else ""} | {number(shown(data, row, "step_ms"), 1)} | '
                     f'{number(shown(data, row, "peak_mb"), 0)} | {number(shown(data, row, "test_images_s"), 1)} | '
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
