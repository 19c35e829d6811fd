"""The benchmark harness runs every (type, grid) in its own process and writes a table, JSON and a
plot with the fitted time exponents."""
import json

from ..conftest import run_tool


def test_benchmark_writes_table_json_and_plot(tmp_path):
    done = run_tool(['tools/analysis_tools/benchmark_attention.py', '--types',
                     'SpatialReductionAttention:sr_ratio=2',
                     '--grids', 4, 8, '--dims', 16, '--heads', 2, '--batch', 1, '--repeats', 2,
                     '--threads', 1, '--out-dir', tmp_path], cwd=tmp_path)
    assert 'time exponent of SpatialReductionAttention:sr_ratio=2' in done.stdout
    result = json.loads((tmp_path / 'results.json').read_text())
    assert len(result['rows']) == 2
    for row in result['rows']:
        assert row['fwd_ms'] > 0 and row['fwd_bwd_ms'] > 0 and row['peak_mb'] >= 0
    assert result['exponents']['SpatialReductionAttention:sr_ratio=2']['fwd_bwd_ms'] is not None
    assert (tmp_path / 'scaling.png').stat().st_size > 1000


def test_benchmark_reports_unknown_type(tmp_path):
    done = run_tool(['tools/analysis_tools/benchmark_attention.py', '--types', 'NoSuchAttention',
                     '--grids', 4, '--out-dir', tmp_path], cwd=tmp_path, check=False)
    assert done.returncode == 1
    assert "unknown attention type 'NoSuchAttention'" in done.stdout
