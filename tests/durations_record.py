"""A record of the suite's time: ``pytest --record-durations PATH`` writes, when the session ends, a
JSON of the wall time, the machine (with its torch), the commit, the slowest tests, each file's
seconds (setup, call and teardown together, as ``--durations`` counts them) and each skipped test
with its reason. ``make test`` writes ``work_dirs/tests/durations.json``;
a copy committed under ``docs/records/tests/`` is the suite's record (``make test-oldest``'s under
``docs/records/tests_oldest/``).

Under pytest-xdist the workers' reports reach the controlling process, which alone writes the file.
This plugin needs pytest and the package's records module (the standard library only: the op tests
run on machines without OpenMMLab)."""
import datetime
import json
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from mmvisattn.analysis.records import cpu_machine

SLOWEST = 15
REPO = Path(__file__).resolve().parents[1]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption('--record-durations', metavar='PATH', default=None,
                     help='write the wall time and the slowest tests of this session as JSON to '
                     'PATH')


class DurationsRecord:
    """Adds up each test's phases as their reports arrive; writes the record at the session's
    end."""

    def __init__(self, path: Path, workers: int):
        self.path = path
        self.workers = workers
        self.start = time.time()
        self.seconds = defaultdict(float)
        self.outcomes = defaultdict(int)
        self.skipped = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        if report.when == 'call' or report.outcome != 'passed':
            self.outcomes[report.outcome] += 1
        if report.skipped and isinstance(report.longrepr, tuple):  # (file, line, 'Skipped: reason')
            self.skipped[report.nodeid] = str(report.longrepr[2]).removeprefix('Skipped: ')

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        import torch
        slowest = sorted(self.seconds.items(), key=lambda item: -item[1])[:SLOWEST]
        now = datetime.datetime.now(datetime.timezone.utc)
        record = dict(
            kind='tests',
            date=now.date().isoformat(),
            time=now.strftime('%H:%M:%SZ'),
            **git_state(),
            machine=dict(cpu_machine(), torch=torch.__version__),
            workers=self.workers,
            wall_s=round(time.time() - self.start, 1),
            tests=len(self.seconds),
            outcomes=dict(self.outcomes),
            exit_status=int(exitstatus),
            test_seconds=round(sum(self.seconds.values()), 1),
            slowest=[dict(test=nodeid, seconds=round(seconds, 1)) for nodeid, seconds in slowest],
            files=per_file(self.seconds),
            skipped=dict(sorted(self.skipped.items())),
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(record, indent=1) + '\n')


def per_file(seconds: dict) -> dict:
    """Each test file's seconds (its tests' phases added up), the slowest file first."""
    files = defaultdict(float)
    for nodeid, value in seconds.items():
        files[nodeid.split('::', 1)[0]] += value
    return {
        path: round(value, 1) for path, value in sorted(files.items(), key=lambda item: -item[1])
    }


def git_state() -> dict:
    """The commit of the repository and whether its tree differs from it (None without git)."""
    def git(*args: str) -> str:
        return subprocess.run(['git', *args], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    try:
        return dict(commit=git('rev-parse', '--short', 'HEAD'),
                    dirty=bool(git('status', '--porcelain')))
    except (OSError, subprocess.CalledProcessError):
        return dict(commit=None, dirty=None)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption('--record-durations')
    if path and not hasattr(config, 'workerinput'):  # the controlling process, not an xdist worker
        workers = config.getoption('numprocesses', None) or 0
        config.pluginmanager.register(DurationsRecord(Path(path).absolute(), int(workers)),
                                      'durations-record')
