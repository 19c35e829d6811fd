"""``make bench``'s tool: paired rounds in one process per op and grid, memory in fresh processes,
the models end to end; it writes a table, JSON and a plot, and replaces only the marked tables of
a README."""
import json
from importlib import import_module

import pytest

from ..conftest import run_tool

TOOL = 'tools/analysis_tools/benchmark_suite.py'


def test_suite_writes_tables_json_plot_and_readme_section(tmp_path):
    readme = tmp_path / 'README.md'
    readme.write_text('# Title\n\nkept above\n<!-- benchmark_suite.py: begin -->\nold tables\n'
                      '<!-- benchmark_suite.py: end -->\nkept below\n')
    done = run_tool([TOOL, '--cases', 'rwgka', 'segformer', '--grids', 8, '--shape', 64, 64, '--rounds', 3,
                     '--threads', 1, '--out-dir', tmp_path / 'out', '--readme', readme], cwd=tmp_path)
    result = json.loads((tmp_path / 'out' / 'results.json').read_text())
    timing = result['ops']['2']['time']['8']
    assert timing['rounds'] >= 3 and timing['ms']['RWGKA'] > 0 and timing['ratio']['RWGKA / SDPA'] > 0
    assert result['ops']['2']['memory']['8']['SDPA']['peak_mb'] >= 0
    assert 'official' not in timing['ms']  # no --peers: no official columns
    models = result['models']['1']
    assert models['time']['ratio']['SegFormer-B0'] == 1.0 and models['time']['ms']['SegFormer-B0-RWGKA'] > 0
    assert (tmp_path / 'out' / 'bench.png').stat().st_size > 1000
    tables = (tmp_path / 'out' / 'tables.md').read_text()
    assert '| 8x8 |' in tables and '| SegFormer-B0-RWGKA |' in tables and tables in done.stdout
    text = readme.read_text()
    assert text.startswith('# Title\n\nkept above\n') and text.endswith('kept below\n')
    assert 'old tables' not in text and tables in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ['README.md', 'out']


def test_bad_arguments_fail_in_one_line(tmp_path):
    done = run_tool([TOOL, '--cases', 'nothing'], cwd=tmp_path, check=False)
    assert done.returncode == 2 and "--cases ['nothing']: expected keys among ['vil'," in done.stderr
    readme = tmp_path / 'README.md'
    readme.write_text('no markers\n')
    done = run_tool([TOOL, '--readme', readme], cwd=tmp_path, check=False)
    assert done.returncode == 2 and 'expected a file holding the lines' in done.stderr
    assert readme.read_text() == 'no markers\n'
    assert 'Traceback' not in done.stderr


def test_official_peers_without_einops_fail_at_once(tmp_path, monkeypatch, capsys):
    """The official ViL and PerViT code imports einops: with --peers and without it the suite stops
    before measuring anything, in one line (not rows of errors a quarter of an hour later)."""
    suite = import_module('mmvisattn.benchmarks.suite')
    real_find_spec = suite.importlib.util.find_spec
    monkeypatch.setattr(suite.importlib.util, 'find_spec', lambda name, *a: None if name == 'einops'
                        else real_find_spec(name, *a))
    with pytest.raises(SystemExit) as exit_info:
        suite.parse_args(['--peers', str(tmp_path)])
    assert exit_info.value.code == 2
    assert 'the official vil and pervit code imports einops; install it with `pip install einops`' in \
        capsys.readouterr().err
    assert suite.parse_args(['--peers', str(tmp_path), '--cases', 'castling']).cases == ['castling']
