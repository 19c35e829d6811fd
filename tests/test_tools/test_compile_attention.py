"""torch.compile (inductor, CPU) of the attentions: forward and backward equal eager, graph breaks
counted. The quick check covers hand-written autograd Functions that are cheap to compile
(linear-angular; ripple's feature map and spatial weights); every type is in the slow one (about two
minutes of C++ compilation on two cores, figures in docs/records/benchmarks.md)."""
import json

import pytest

from ..conftest import run_tool

TOOL = 'tools/analysis_tools/compile_attention.py'
QUICK = ['LinearAngularAttention', 'RippleAttention']


def compile_report(tmp_path, *types):
    run_tool([TOOL, *(['--types', *types] if types else []), '--out-dir', tmp_path], cwd=tmp_path)
    return {row['type']: row for row in json.loads((tmp_path / 'compile.json').read_text())['rows']}


def test_compiled_attentions_equal_eager(tmp_path):
    rows = compile_report(tmp_path, *QUICK)
    assert sorted(rows) == QUICK
    for row in rows.values():
        assert 'error' not in row and row['max_relative_error'] <= 1e-4, row
    # the written-out Functions (linear-angular; ripple's feature map and spatial weights) trace
    # whole
    assert rows['LinearAngularAttention']['graph_breaks'] == 0
    assert rows['RippleAttention']['graph_breaks'] == 0


@pytest.mark.slow
def test_every_attention_compiles(tmp_path):
    rows = compile_report(tmp_path)
    for row in rows.values():
        assert 'error' not in row and row['max_relative_error'] <= 1e-4, row


def test_unknown_type_is_one_line(tmp_path):
    done = run_tool([TOOL, '--types', 'NoSuchAttention', '--out-dir', tmp_path], cwd=tmp_path,
                    check=False)
    assert (done.returncode == 2
            and 'unknown attention type NoSuchAttention; registered:' in done.stderr)
    assert 'Traceback' not in done.stderr
