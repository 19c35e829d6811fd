"""Records rendered from committed JSON when the docs are built. A page that holds the line
``<!-- records: tests -->`` gets, in its place, the tables of the newest record under
``docs/records/tests/`` (what ``make test`` writes to ``work_dirs/tests/durations.json``), stamped
with its machine, date and commit; ``<!-- records: gpu -->`` gets the tables of the newest record of
each GPU under ``docs/records/gpu/`` (:func:`lab.records.tables`); ``<!-- records: bench -->``
the side-by-side benchmark's tables from the records under ``docs/records/bench/`` (``make bench``),
``<!-- records: bench_models -->`` the model pairs' from those under ``docs/records/bench_models/``
(``make bench-models``) and ``<!-- records: bench_models FAMILY -->`` those of one family's pairs;
``<!-- records: bench_deploy -->`` the newest run through mmdeploy's tools (``make bench-deploy``);
``<!-- records: bench_demos -->`` the demos' images per second beside their stock twins
(``make bench-demos``); ``<!-- records: arena FOLDER -->`` the attention arena's table and plots of
the newest record under ``docs/records/arena/`` of each config of ``configs/FOLDER/``
(``compare_attentions.py --record-dir``); ``<!-- records: demo_spread [FOLDER|CONFIG] -->`` the runs
of each demo's newest spread record (``make demo-spread``) of ``configs/FOLDER/``, or of the config
named by its file name without ``.py``. Each op, model group or pair comes from the newest record
that measured it (a run may measure some: ``--cases``, ``--pairs``), under that record's stamp.
Nothing generated is committed as text."""
import json
import re
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

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
    torch = f', torch {machine["torch"]}' if 'torch' in machine else ''
    lines: List[str] = [
        f'Newest record: {record["date"]}, commit `{record["commit"]}`'
        f'{" (with uncommitted changes)" if record["dirty"] else ""}, {machine["cpu"]} with '
        f'{machine["cores"]} cores, '
        f'Python {machine["python"]}{torch}, {record["workers"]} workers.', '',
        '| wall time | tests | outcomes | test-seconds |', '|---|---|---|---|',
        f'| {record["wall_s"]:.0f} s | {record["tests"]} | {outcomes} | '
        f'{record["test_seconds"]:.0f} s |', '',
        '## The slowest tests', '', '| test | seconds |', '|---|---|']
    lines += [f'| `{row["test"]}` | {row["seconds"]:.1f} |' for row in record['slowest']]
    if record.get('skipped'):  # kept since the oldest torch's suite
        lines += ['', '## Skipped, and why', '', '| test | reason |', '|---|---|']
        lines += [f'| `{test}` | {reason} |' for test, reason in record['skipped'].items()]
    if 'files' in record:  # kept since 08f6a3e
        lines += ['', '## Seconds per test file', '', '| file | seconds |', '|---|---|']
        by_time = sorted(record['files'].items(), key=lambda item: -item[1])
        lines += [f'| `{name}` | {seconds:.0f} |' for name, seconds in by_time]
    return '\n'.join(lines) + '\n'


def gpu_tables() -> str:
    from lab.records import tables
    return tables(RECORDS / 'gpu')


def by_newest_record(records: List[dict], keys: List, held) -> Tuple[List[Tuple[dict, List]], List]:
    """``keys`` shared out to the newest record that holds each (``records`` the newest first,
    ``held(record)`` the keys it measured): each record with its keys, the newest first, and the
    keys no record holds."""
    owner = {key: next((i for i, record in enumerate(records) if key in held(record)),
                       None) for key in keys}
    groups = [(records[i], [key for key in keys if owner[key] == i])
              for i in sorted({i for i in owner.values() if i is not None})]
    return groups, [key for key in keys if owner[key] is None]


def bench_tables(_: Optional[str]) -> str:
    """The side-by-side tables, each op and model group from the newest record that measured it (a
    run may measure some: ``--cases``)."""
    from lab.bench.suite import tables
    from lab.bench.suite_cases import MODEL_GROUPS, OP_CASES
    from lab.records import cpu_records, cpu_stamp
    records = cpu_records(RECORDS / 'bench')
    if not records:
        raise FileNotFoundError(f'no record under {RECORDS / "bench"}: make bench writes one')
    keys = [('ops',
             str(i)) for i in range(len(OP_CASES))] + [('models',
                                                        str(i)) for i in range(len(MODEL_GROUPS))]
    groups, _ = by_newest_record(records, keys, lambda record: {
        (part, index) for part in ('ops', 'models') for index in record['results'][part]})
    lines = []
    for record, held in groups:
        mine = {part: {index: record['results'][part][index] for kind,
                       index in held if kind == part}
                for part in ('ops', 'models')}
        lines += [cpu_stamp(record), '', tables(mine), '']
    return '\n'.join(lines)


def bench_models_tables(family: Optional[str]) -> str:
    """The model pairs' tables, each pair from the newest record that measured it (a run may measure
    some pairs only: ``--pairs``), of one family's pairs where ``family`` is given."""
    from lab.bench.model_pairs import PAIRS
    from lab.bench.models import tables
    from lab.records import cpu_records, cpu_stamp
    wanted = [key for key, pair in PAIRS.items() if family in (None, pair.family)]
    groups, missing = by_newest_record(cpu_records(RECORDS / 'bench_models'), wanted,
                                       lambda record: record['results']['pairs'])
    lines = []
    for record, keys in groups:
        results = record['results']
        lines += [cpu_stamp(record), '',
                  tables({key: results['pairs'][key] for key in keys}, results['batch'],
                                                results['threads'])]
    if missing:
        lines.append(f'Not measured in any record yet: {", ".join(missing)}.\n')
    return '\n'.join(lines)


def bench_deploy_tables(_: Optional[str]) -> str:
    """Every family through mmdeploy's tools and the deployed latencies, each case and pair from the
    newest record that measured it (a run may measure some: ``--cases``, ``--latency``)."""
    from lab.deploy_benchmark import CASES, LATENCY_PAIRS, case_table, latency_table
    from lab.records import cpu_records, cpu_stamp
    records = cpu_records(RECORDS / 'bench_deploy')
    if not records:
        raise FileNotFoundError(f'no record under {RECORDS / "bench_deploy"}: make bench-deploy '
                                'writes one')
    lines = []
    for part, keys, table in (('cases', list(CASES), case_table),
                              ('latency', list(LATENCY_PAIRS), latency_table)):
        groups, missing = by_newest_record(records, keys,
                                           lambda record: record['results'][part])  # noqa: B023
        for record, held in groups:
            lines += [cpu_stamp(record), '',
                      table({key: record['results'][part][key] for key in held}), '']
        if missing:
            lines.append(f'Not measured in any record yet: {", ".join(missing)}.\n')
    return '\n'.join(lines)


def bench_demos_tables(_: Optional[str]) -> str:
    """The demos beside their stock twins, each pair from the newest record that measured it (a run
    may measure some: ``--pairs``)."""
    from lab.bench.demo_fps import PAIRS, table
    from lab.records import cpu_records, cpu_stamp
    groups, missing = by_newest_record(cpu_records(RECORDS / 'bench_demos'), list(PAIRS),
                                       lambda record: record['results']['pairs'])
    lines = []
    for record, keys in groups:
        results = dict(record['results'],
                       pairs={key: record['results']['pairs'][key] for key in keys})
        lines += [cpu_stamp(record), '', table(results)]
    if missing:
        lines.append(f'Not measured in any record yet: {", ".join(missing)}.\n')
    return '\n'.join(lines)


def arena_tables(folder: Optional[str]) -> str:
    """The attention arena of each config of ``configs/<folder>/``: the newest record's table and
    plots."""
    from lab.records import cpu_records, cpu_stamp
    from mmvisattn.analysis.compare_attentions import table
    newest_of: Dict[str, dict] = {}
    for record in cpu_records(RECORDS / 'arena'):  # the newest first
        config = record['results']['config']
        if Path(config).parent.name == folder:
            newest_of.setdefault(config, record)
    if not newest_of:
        raise FileNotFoundError(f'no arena record of a config of configs/{folder}/ under '
                                f'{RECORDS / "arena"}')
    lines = []
    for record in newest_of.values():
        stem = record['name'][:-len('.json')]
        lines += [cpu_stamp(record), '', table(record['results']),
                  f'![cost](/records/arena/{stem}_cost.png)',
                  f'![metric against cost](/records/arena/{stem}_metric.png)', '']
    return '\n'.join(lines)


def demo_spread_tables(folder: Optional[str]) -> str:
    """The spread of each demo of ``configs/<folder>/``, or of the config of that name (every demo's
    without one): the newest record's runs."""
    from lab.records import cpu_records, cpu_stamp
    from mmvisattn.analysis.demo_spread import table
    newest_of: Dict[str, dict] = {}
    for record in cpu_records(RECORDS / 'demo_spread'):  # the newest first
        config = record['results']['config']
        if folder is None or folder in (Path(config).parent.name, Path(config).stem):
            newest_of.setdefault(config, record)
    if not newest_of:
        raise FileNotFoundError(f'no demo_spread record of configs/{folder or "*"}/ under '
                                f'{RECORDS / "demo_spread"}')
    lines = []
    for config, record in newest_of.items():
        lines += [f'`{config}`: {cpu_stamp(record)}', '', table(record['results']), '']
    return '\n'.join(lines)


MARKS: Dict[str, Callable[[Optional[str]], str]] = {
    'tests': lambda _: tests_tables(newest('tests')),
    'tests_oldest': lambda _: tests_tables(newest('tests_oldest'))
    if list((RECORDS / 'tests_oldest').glob('*.json'))
    else 'No record yet: `make test-oldest` writes one.\n', 'gpu': lambda _: gpu_tables(),
    'bench': bench_tables, 'bench_models': bench_models_tables, 'bench_deploy': bench_deploy_tables,
    'bench_demos': bench_demos_tables, 'arena': arena_tables, 'demo_spread': demo_spread_tables,
}
MARK = re.compile(r'<!-- records: (\w+)(?: (\w+))? -->')


def render(app, docname: str, source: List[str]) -> None:
    def tables(match: re.Match) -> str:
        if match.group(1) not in MARKS:
            raise ValueError(f'{docname}: {match.group(0)!r} names no records; expected one of '
                             f'{sorted(MARKS)}')
        return MARKS[match.group(1)](match.group(2))

    text = MARK.sub(tables, source[0])
    if text != source[0]:
        source[0] = text
        app.env.record_pages = getattr(app.env, 'record_pages', set()) | {docname}


def reread_record_pages(app, env, added, changed, removed) -> List[str]:
    """The pages that render records are read again on every build: a new record changes no
    source."""
    return sorted(getattr(env, 'record_pages', set()))


def setup(app) -> dict:
    app.connect('source-read', render)
    app.connect('env-get-outdated', reread_record_pages)
    return dict(parallel_read_safe=True)
