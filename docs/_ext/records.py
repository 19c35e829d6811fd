"""Records rendered from committed JSON when the docs are built. A page that holds the line
``<!-- records: tests -->`` gets, in its place, the tables of the newest record under
``docs/records/tests/`` (what ``make test`` writes to ``work_dirs/tests/durations.json``), stamped with
its machine, date and commit; ``<!-- records: gpu -->`` gets the tables of the newest record of each
GPU under ``docs/records/gpu/`` (:func:`mmvisattn.proof.records.tables`). Nothing generated is
committed as text."""
import json
from pathlib import Path
from typing import Callable, Dict, List

RECORDS = Path(__file__).resolve().parents[1] / 'records'


def newest(kind: str) -> dict:
    """The newest record of ``kind`` (by date and UTC time; records from before the time was kept
    come first on their day)."""
    def when(path: Path) -> tuple:
        record = json.loads(path.read_text())
        return record['date'], record.get('time', ''), path.name

    paths = sorted((RECORDS / kind).glob('*.json'), key=when)
    if not paths:
        raise FileNotFoundError(f'no record under {RECORDS / kind}')
    return json.loads(paths[-1].read_text())


def tests_tables(record: dict) -> str:
    machine = record['machine']
    outcomes = ', '.join(f'{count} {outcome}' for outcome, count in record['outcomes'].items())
    lines: List[str] = [
        f'Newest record: {record["date"]}, commit `{record["commit"]}`'
        f'{" (with uncommitted changes)" if record["dirty"] else ""}, {machine["cpu"]} with {machine["cores"]} cores, '
        f'Python {machine["python"]}, {record["workers"]} workers.', '',
        '| wall time | tests | outcomes | test-seconds |', '|---|---|---|---|',
        f'| {record["wall_s"]:.0f} s | {record["tests"]} | {outcomes} | {record["test_seconds"]:.0f} s |', '',
        '## The slowest tests', '', '| test | seconds |', '|---|---|']
    lines += [f'| `{row["test"]}` | {row["seconds"]:.1f} |' for row in record['slowest']]
    if 'files' in record:  # kept since 08f6a3e
        lines += ['', '## Seconds per test file', '', '| file | seconds |', '|---|---|']
        by_time = sorted(record['files'].items(), key=lambda item: -item[1])
        lines += [f'| `{name}` | {seconds:.0f} |' for name, seconds in by_time]
    return '\n'.join(lines) + '\n'


def gpu_tables() -> str:
    from mmvisattn.proof.records import tables
    return tables(RECORDS / 'gpu')


MARKS: Dict[str, Callable[[], str]] = {
    '<!-- records: tests -->': lambda: tests_tables(newest('tests')),
    '<!-- records: gpu -->': gpu_tables,
}


def render(app, docname: str, source: List[str]) -> None:
    for mark, tables in MARKS.items():
        if mark in source[0]:
            source[0] = source[0].replace(mark, tables())
            app.env.record_pages = getattr(app.env, 'record_pages', set()) | {docname}


def reread_record_pages(app, env, added, changed, removed) -> List[str]:
    """The pages that render records are read again on every build: a new record changes no source."""
    return sorted(getattr(env, 'record_pages', set()))


def setup(app) -> dict:
    app.connect('source-read', render)
    app.connect('env-get-outdated', reread_record_pages)
    return dict(parallel_read_safe=True)
