"""The report of the GPU proof (``gpu_proof.py``): rows described in one line each and the Markdown
of ``gpu_proof.md``, one table per section."""
from typing import Dict, List


def first_line(error) -> str:
    text = str(error).strip().splitlines()
    return (
        f'{type(error).__name__}: {text[0] if text else ""}'
        if isinstance(error, BaseException)
        else (text[0] if text else '')
    )


def describe(size) -> str:
    return f'B{size.batch} h{size.heads} d{size.dims} {size.hw[0]}x{size.hw[1]}'


def row_label(row: Dict) -> str:
    keys = ('op', 'impl', 'dtype', 'layer', 'generators')
    return ' '.join(str(row[key]) for key in keys
                    if key in row) + (f' ({row["error"]})' if isinstance(
        row.get('error'), str) else '')


def mark_fastest(rows: List[Dict], baseline: str) -> List[Dict]:
    """``fastest`` set on the row of least forward + backward time (the op's implementations and the
    ``baseline`` over the same tokens), ``fastest_impl`` on the op's own fastest implementation."""
    timed = [row for row in rows if 'forward_backward_ms' in row]
    best = min(timed, key=lambda row: row['forward_backward_ms']) if timed else None
    own = [row for row in timed if row['impl'] != baseline]
    best_own = min(own, key=lambda row: row['forward_backward_ms']) if own else None
    return [dict(row, fastest=row is best, fastest_impl=row is best_own) for row in rows]


def faster_than_auto(rows: List[Dict]) -> List[str]:
    """A line per benchmark layer whose fastest implementation is not ``auto``'s choice: a backend
    to move ahead in its op's chain, or an experimental kernel to replace the incumbent with."""
    auto = {(row['op'], row['layer']): row['impl'] for row in rows if row.get('auto')}
    return [f'{row["op"]} at {row["layer"]}: {row["impl"]} measured fastest; auto takes '
            f'{auto.get((row["op"], row["layer"]))}' for row in rows
            if row.get('fastest_impl') and auto.get((row['op'], row['layer'])) != row['impl']]


def markdown(meta: Dict, sections: Dict[str, Dict]) -> str:
    lines = [f'# GPU proof: {meta["device_name"]}, {meta["date"]}', '',
             f'torch {meta["torch"]}, CUDA {meta["cuda"]}, Triton {meta["triton"]}, Python '
             f'{meta["python"]}; {meta["seconds"]} s; {len(meta["failures"])} failed checks', '']
    for name, section in sections.items():
        lines.append(f'## {name}'
                     + (f' (skipped: {section["skipped"]})' if 'skipped' in section else
                                     f' ({section["seconds"]} s)'))
        rows = section['rows']
        if rows:
            columns = list(dict.fromkeys(key for row in rows for key in row))
            lines += ['', '| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
            lines += ['| ' + ' | '.join(cell(row.get(key, '')) for key in columns)
                      + ' |' for row in rows]
        lines.append('')
    return '\n'.join(lines)


def cell(value) -> str:
    if isinstance(value, float):
        return f'{value:.2e}' if abs(value) < 1e-2 and value else f'{value:g}'
    if isinstance(value, list):
        return '; '.join(map(str, value))
    return str(value).replace('|', '/')
