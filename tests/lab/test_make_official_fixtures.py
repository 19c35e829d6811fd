"""tools/analysis_tools/make_official_fixtures.py needs the official checkouts, which CI does not
have: the fixtures it writes are checked in and reproduced by
tests/test_models/test_official_golden.py. Here: a missing checkout is named in one line before
anything is written, and the checked-in fixtures are what the tool's README says (every listed file
present, loadable without pickle, small)."""
import re

import torch

from ..conftest import REPO, run_tool

FIXTURES = REPO / 'tests' / 'data' / 'official'


def test_missing_checkouts_are_named_in_one_line(tmp_path):
    (tmp_path / 'juhongm999+pervit').mkdir()
    done = run_tool(['tools/analysis_tools/make_official_fixtures.py', tmp_path, '--out',
                     tmp_path / 'out'], tmp_path,
                    timeout=120, check=False)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith('make_official_fixtures: ') and 'Traceback' not in done.stderr, (
        done.stderr
    )
    assert 'microsoft+vision-longformer' in lines[-1] and 'juhongm999+pervit' not in lines[-1]
    assert not (tmp_path / 'out').exists()


def test_checked_in_fixtures_match_their_readme():
    listed = re.findall(r'^\| `(\w+)\.pt` \| (\d+) \|', (FIXTURES / 'README.md').read_text(),
                        flags=re.M)
    assert len(listed) == 11
    for name, size in listed:
        path = FIXTURES / f'{name}.pt'
        assert path.stat().st_size == int(size), name
        fixture = torch.load(path, weights_only=True)
        assert fixture['dtype'] == 'float64' and fixture['output'].dtype == torch.float64
    assert sum(p.stat().st_size for p in FIXTURES.glob('*.pt')) < 6e6
