"""OpenMMLab's own tests pass with mmvisattn imported wherever they pass without it: the stock
suites of ``../shared/stock_tests`` compared test by test (``tests/stock/compare.py``, also
``make test-stock``), the plain outcomes taken from ``tests/stock/plain_baseline.json`` where its
key matches the suite and the installed stack (a regression found so is confirmed by the plain pass
run then).

Where that folder is missing the test skips with one line; CI sets
``MMVISATTN_REQUIRE_STOCK_TESTS=1``, under which it fails instead."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from ..conftest import REPO

# the outcomes of a suite's two passes: one test passes in both, one fails with mmvisattn only, one
# in both
PASSING, REGRESSING, FAILING = (
    f'tests.test_toy::test_{name}' for name in ('passes', 'regresses', 'fails')
)
TOY_OUTCOMES = dict(plain={PASSING: ('passed', ''), REGRESSING: ('passed', ''),
                           FAILING: ('failed', 'E assert')},
                    mmvisattn={PASSING: ('passed', ''), REGRESSING: ('failed', 'E assert'),
                               FAILING: ('failed', 'E')})
STOCK_DIR = REPO.parent / 'shared' / 'stock_tests'
REQUIRED = 'MMVISATTN_REQUIRE_STOCK_TESTS'
# one pass at a time: the test holds one of the suite's workers, and the other runs the rest of the
# suite
JOBS = 1


@pytest.mark.starts_first
def test_stock_suites_pass_with_mmvisattn_imported(tmp_path):
    if not STOCK_DIR.is_dir():
        message = f'{STOCK_DIR} is missing: the stock suites are not compared'
        if os.environ.get(REQUIRED) == '1':
            pytest.fail(f'{message} ({REQUIRED}=1)')
        pytest.skip(message)
    done = subprocess.run([sys.executable, str(REPO / 'tests/stock/compare.py'), '--stock-dir',
                           str(STOCK_DIR),
                           '--jobs', str(JOBS), '--out-dir', str(tmp_path), '--baseline'],
                          capture_output=True, text=True, timeout=2400)
    print(done.stdout)
    assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]


def load_compare():
    spec = importlib.util.spec_from_file_location('stock_compare', REPO / 'tests/stock/compare.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The compare module with one suite, ``toy`` (one test file under ``tmp_path/stock``), whose
    passes return :data:`TOY_OUTCOMES` and are logged in ``ran``."""
    compare = load_compare()
    monkeypatch.setitem(compare.SUITES, 'toy', dict(paths=['tests']))
    (tmp_path / 'stock/toy/tests').mkdir(parents=True)
    (tmp_path / 'stock/toy/tests/test_toy.py').write_text('def test_passes():\n    pass\n')
    ran = []

    def run_passes(stock_dir, keys, jobs, out_dir):
        ran.extend(keys)
        return {key: dict(seconds=1.0, returncode=1, tail=[],
                          outcomes=dict(TOY_OUTCOMES[key[1]])) for key in keys}

    monkeypatch.setattr(compare, 'run_passes', run_passes)
    return compare, tmp_path / 'stock', ran


def test_a_suite_runs_both_passes_without_a_baseline_and_keeps_its_plain_outcomes(toy, tmp_path):
    compare, stock, ran = toy
    record = compare.run_suites(stock, ['toy'], 1, tmp_path, None)
    entry = record['suites']['toy']
    assert ran == [('toy', 'plain'), ('toy', 'mmvisattn')] and not entry['plain_from_baseline']
    assert [item['test'] for item in entry['regressions']] == [REGRESSING]
    assert [item['test'] for item in entry['failing_in_both']] == [FAILING]
    compare.write_baseline(record, tmp_path / 'baseline.json')
    baseline = json.loads((tmp_path / 'baseline.json').read_text())
    assert (
        baseline['toy']['key'] == compare.suite_key(stock, 'toy')
        and len(baseline['toy']['outcomes']) == 3
    )


def test_kept_plain_outcomes_are_used_where_the_key_matches_and_a_regression_is_confirmed(
    toy, tmp_path
):
    compare, stock, ran = toy
    plain = {test: list(outcome) for test, outcome in TOY_OUTCOMES['plain'].items()}
    baseline = dict(toy=dict(key=compare.suite_key(stock, 'toy'), returncode=1, outcomes=plain))
    entry = compare.run_suites(stock, ['toy'], 1, tmp_path, baseline)['suites']['toy']
    # a regression: the plain pass runs after all to confirm it
    assert ran == [('toy', 'mmvisattn'), ('toy', 'plain')] and not entry['plain_from_baseline']
    assert [item['test'] for item in entry['regressions']] == [REGRESSING]
    # no regression: the plain pass is the baseline's
    ran.clear()
    plain[REGRESSING] = ['failed', 'E assert']
    entry = compare.run_suites(stock, ['toy'], 1, tmp_path, baseline)['suites']['toy']
    assert ran == [('toy',
                    'mmvisattn')] and entry['plain_from_baseline'] and not entry['regressions']
    assert entry['plain']['seconds'] == 0.0 and entry['plain']['failed'] == 2


def test_any_change_of_the_suite_or_the_stack_changes_its_key(toy, monkeypatch):
    compare, stock, _ = toy
    key = compare.suite_key(stock, 'toy')
    (stock / 'toy/tests/test_toy.py').write_text('def test_passes():\n    assert True\n')
    assert compare.suite_key(stock, 'toy') != key
    key = compare.suite_key(stock, 'toy')
    monkeypatch.setattr(compare, '_version', lambda package: '0.0' if package == 'mmcv' else 'x')
    assert compare.suite_key(stock, 'toy') != key
