"""The suite's own machinery: tools forked from the tool server run as a fresh interpreter would run
them (their arguments, directory, environment and streams; the project imported by the run, not by
the server; a time-out kills the run), and ``--record-durations`` writes the suite's record."""
import json
import subprocess
import sys
import textwrap

import pytest

from .conftest import FORK_TOOLS, REPO, TOOLS, run_command, tool_env

pytestmark = pytest.mark.lab  # a check of the maintainers: make test-lab

# where tools start fresh interpreters, there is no server to test
forking = pytest.mark.skipif(not FORK_TOOLS, reason='MMVISATTN_TEST_FRESH_TOOLS=1, or no OpenMMLab')

PROBE = """\
import json, os, sys

print(json.dumps(dict(argv=sys.argv[1:], cwd=os.getcwd(), marker=os.environ.get('PROBE_MARKER'),
                      path0=sys.path[0], main=__name__, project='mmvisattn' in sys.modules,
                      stock='mmdet.datasets' in sys.modules, pid=os.getpid())))
print('to stderr', file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def forked(tmp_path, *args, env=None, timeout=60):
    script = tmp_path / 'probe.py'
    script.write_text(PROBE)
    env = env or tool_env()
    assert TOOLS.serves(env)
    return run_command([sys.executable, str(script), *map(str, args)], timeout, forked=True,
                       cwd=tmp_path, env=env)


@forking
def test_a_forked_run_has_its_arguments_directory_environment_and_streams(tmp_path):
    done = forked(tmp_path, 3, 'x y', env=dict(tool_env(), PROBE_MARKER='m'))
    seen = json.loads(done.stdout)
    assert done.returncode == 3 and done.stderr == 'to stderr\n'
    assert seen['argv'] == ['3', 'x y'] and seen['cwd'] == str(tmp_path) and seen['marker'] == 'm'
    assert seen['path0'] == str(tmp_path) and seen['main'] == '__main__'
    # the stock stack comes pre-imported; the project is the run's own to import
    assert seen['stock'] and not seen['project']
    again = forked(tmp_path, 0)  # each run a process of its own
    assert again.returncode == 0 and json.loads(again.stdout)['pid'] != seen['pid']


@forking
def test_an_uncaught_exception_prints_its_traceback_and_exits_1(tmp_path):
    script = tmp_path / 'raises.py'
    script.write_text('raise ValueError("bad value")\n')
    done = run_command([sys.executable, str(script)], 60, forked=True, cwd=tmp_path, env=tool_env())
    assert done.returncode == 1 and done.stderr.strip().splitlines()[-1] == 'ValueError: bad value'


@forking
def test_a_run_past_its_limit_is_killed(tmp_path):
    script = tmp_path / 'sleeps.py'
    script.write_text('import time\ntime.sleep(600)\n')
    with pytest.raises(subprocess.TimeoutExpired):
        TOOLS.run([sys.executable, str(script)], 2, cwd=tmp_path, env=tool_env())


@forking
def test_an_environment_read_at_start_up_gets_a_fresh_interpreter():
    assert not TOOLS.serves(dict(tool_env(), PYTHONPATH='/elsewhere'))


def test_the_durations_record(tmp_path):
    (tmp_path / 'test_two.py').write_text(textwrap.dedent('''\
        import time
        def test_slow():
            time.sleep(0.3)
        def test_fast():
            pass
        '''))
    record = tmp_path / 'out' / 'durations.json'
    done = run_command([sys.executable, '-m', 'pytest', '-p', 'tests.durations_record', '-p',
                        'no:cacheprovider',
                        str(tmp_path / 'test_two.py'), '--record-durations', str(record)], 120,
                       cwd=tmp_path, env=dict(tool_env(), PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stdout[-2000:]
    written = json.loads(record.read_text())
    assert (
        written['kind'] == 'tests'
        and written['outcomes'] == {'passed': 2}
        and written['tests'] == 2
    )
    assert (
        written['slowest'][0]['test'].endswith('test_two.py::test_slow')
        and written['slowest'][0]['seconds'] >= 0.3
    )
    assert written['machine']['cores'] >= 1 and written['wall_s'] > 0 and 'commit' in written
