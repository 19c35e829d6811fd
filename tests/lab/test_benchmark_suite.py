"""``make bench``'s tool: paired rounds in one process per op and grid, memory in fresh processes,
the models end to end; it writes a table, JSON, a plot and its record (results stamped with machine,
date and commit), which the docs render."""
import json
from importlib import import_module

import pytest

from ..conftest import run_tool

TOOL = 'tools/analysis_tools/benchmark_suite.py'


def test_suite_writes_tables_json_plot_and_record(tmp_path):
    done = run_tool([TOOL, '--cases', 'rwgka', 'segformer', '--grids', 8, '--shape', 64, 64,
                     '--rounds', 3, '--threads', 1, '--out-dir', tmp_path / 'out', '--record-dir',
                     tmp_path / 'records'], cwd=tmp_path)
    result = json.loads((tmp_path / 'out' / 'results.json').read_text())
    timing = result['ops']['2']['time']['8']
    assert (
        timing['rounds'] >= 3 and timing['ms']['RWGKA'] > 0 and timing['ratio']['RWGKA / SDPA'] > 0
    )
    assert result['ops']['2']['memory']['8']['SDPA']['peak_mb'] >= 0
    assert 'official' not in timing['ms']  # no --peers: no official columns
    models = result['models']['1']
    assert (
        models['time']['ratio']['SegFormer-B0'] == 1.0
        and models['time']['ms']['SegFormer-B0-RWGKA'] > 0
    )
    assert (tmp_path / 'out' / 'bench.png').stat().st_size > 1000
    tables = (tmp_path / 'out' / 'tables.md').read_text()
    assert '| 8x8 |' in tables and '| SegFormer-B0-RWGKA |' in tables and tables in done.stdout
    (committed,) = (tmp_path / 'records').iterdir()
    record = json.loads(committed.read_text())
    assert record == json.loads((tmp_path / 'out' / 'record_bench.json').read_text())
    assert committed.name == record['name'] and record['name'].endswith(
        f'-cores_{record["commit"]}_bench.json'
    )
    assert (
        record['kind'] == 'bench'
        and record['results'] == result
        and record['machine']['cores'] >= 1
    )
    suite = import_module('lab.bench.suite')
    assert suite.tables(record['results']) == tables  # what the docs render from the record
    assert sorted(p.name for p in tmp_path.iterdir()) == ['out', 'records']


def test_bad_arguments_fail_in_one_line(tmp_path):
    done = run_tool([TOOL, '--cases', 'nothing'], cwd=tmp_path, check=False)
    assert (done.returncode == 2
            and "--cases ['nothing']: expected keys among ['vil'," in done.stderr)
    assert 'Traceback' not in done.stderr


def test_official_peers_without_einops_fail_at_once(tmp_path, monkeypatch, capsys):
    """The official ViL and PerViT code imports einops: with --peers and without it the suite stops
    before measuring anything, in one line (not rows of errors a quarter of an hour later)."""
    suite = import_module('lab.bench.suite')
    real_find_spec = suite.importlib.util.find_spec
    monkeypatch.setattr(suite.importlib.util, 'find_spec', lambda name, *a: None if name == 'einops'
                        else real_find_spec(name, *a))
    with pytest.raises(SystemExit) as exit_info:
        suite.parse_args(['--peers', str(tmp_path)])
    assert exit_info.value.code == 2
    assert (
        'the official vil and pervit code imports einops; install it with `pip install einops`'
        in capsys.readouterr().err
    )
    assert suite.parse_args(['--peers', str(tmp_path), '--cases', 'castling']).cases == ['castling']
