"""``make bench-models``' tool: a project model and its stock counterpart trained one step on
synthetic targets, saved bytes and time per size, the largest-input predictions, tables, JSON, a
plot and its record, which the docs render; bad names and sizes refused in one line."""
import json
from importlib import import_module

import pytest

from ..conftest import run_tool

TOOL = 'tools/analysis_tools/benchmark_models.py'
# one thread: the suite's other worker runs beside it on the two cores (two threads would spin-wait)
SMALLEST = ['--pairs', 'picodet-s-castling', '--sizes', '64x64', '96x96', '128x128', '--rounds', 1,
            '--threads', 1]


def test_smallest_pair_writes_tables_json_plot_and_record(tmp_path):
    done = run_tool([TOOL, *SMALLEST, '--out-dir', tmp_path / 'out', '--record-dir',
                     tmp_path / 'records'],
                    cwd=tmp_path)
    entry = json.loads((tmp_path / 'out' / 'results.json').read_text())['picodet-s-castling']
    for side in ('project', 'stock'):
        rows = entry['memory'][side]
        assert [row['saved_mb'] > 0 and row['step_s'] > 0 for row in rows] == [True] * 3
        # activations grow with pixels
        assert rows[0]['saved_mb'] < rows[1]['saved_mb'] < rows[2]['saved_mb']
        assert 'gmacs' in rows[2] and 'gmacs' not in rows[0]  # counted at the training size only
        assert entry['fit'][side]['largest_side']['24'] <= entry['fit'][side]['largest_side']['80']
        assert abs(entry['fit'][side]['extrapolation_error']) < 0.5
    assert entry['memory']['project'][0]['params'] != entry['memory']['stock'][0]['params']
    assert entry['time']['ratio']['project / stock'] > 0 and entry['time']['rounds'] == 2
    assert (tmp_path / 'out' / 'saved_bytes.png').stat().st_size > 1000
    tables = (tmp_path / 'out' / 'tables.md').read_text()
    assert '| picodet-s-castling vs PicoDet-S ESNet | 128x128 |' in tables and tables in done.stdout
    (committed,) = (tmp_path / 'records').iterdir()
    record = json.loads(committed.read_text())
    assert committed.name == record['name'] and record['kind'] == 'bench_models'
    assert record['results'] == dict(pairs={'picodet-s-castling': entry}, batch=2, threads=1)
    resumed = run_tool([TOOL, *SMALLEST, '--out-dir', tmp_path / 'out', '--resume', '--record-dir',
                        tmp_path / 'records'], cwd=tmp_path)
    # same settings: nothing measured again
    assert 'picodet-s-castling: kept from' in resumed.stdout
    assert list((tmp_path / 'records').iterdir()) == [committed]  # nor recorded again
    assert (tmp_path / 'out' / 'tables.md').read_text() == tables


def test_prediction_solves_the_fitted_memory():
    tool = import_module('lab.bench.models')
    assert tool.fit_saved([1, 2, 3, 4], [5, 7, 9, 11]) == pytest.approx((3, 2, 0), abs=1e-9)
    # 16 bytes a parameter plus 1 KiB a pixel: 2^20 parameters and 1 GB leave (2^30 - 2^24) / 2^10
    # pixels
    side = tool.largest_side((0.0, 1024.0, 0.0), 2**20, 1, 32)
    assert side % 32 == 0 and side ** 2 * 1024 <= 2**30 - 2**24 < (side + 32) ** 2 * 1024


@pytest.mark.parametrize('argv, message', [
    (['--families', 'vit'],
     "--families ['vit']: expected names among ['castling', 'pervit', 'picodet',"),
    (['--pairs', 'picodet-s-castling', '--sizes', '100x128'],
     '--sizes 100x128: expected positive sides divisible by 32 (the stride of picodet-s-castling)'),
    (['--sizes', '64'], "'64': expected HxW, for example 512x512"),
])
def test_bad_names_and_sizes_fail_in_one_line(tmp_path, argv, message):
    done = run_tool([TOOL, *argv, '--out-dir', tmp_path / 'out'], cwd=tmp_path, check=False)
    assert done.returncode == 2 and message in done.stderr.strip().splitlines()[-1]
    assert 'Traceback' not in done.stderr and not (tmp_path / 'out').exists()


def test_module_profile_attributes_time_and_saved_bytes(tmp_path):
    done = run_tool(['tools/analysis_tools/profile_training.py', 'picodet-s-castling', '--shape',
                     64, 64, '--depth', 1],
                    cwd=tmp_path)
    rows = {line.split(' | ')[0].strip('| '): line for line in done.stdout.splitlines()
            if line.startswith('| ')}
    assert {'backbone', 'neck', 'bbox_head'} <= set(rows)
    assert (
        float(rows['backbone'].split(' | ')[1]) > 0
        and float(rows['backbone'].split(' | ')[2].strip(' |')) > 0
    )
    refused = run_tool(['tools/analysis_tools/profile_training.py', 'picodet', '--shape', 64, 64],
                       cwd=tmp_path, check=False)
    assert (
        refused.returncode == 2
        and "pair 'picodet': expected one of" in refused.stderr.strip().splitlines()[-1]
    )
