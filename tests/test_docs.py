"""The documentation site builds as ``make docs`` builds it: every warning an error (a broken link
between pages, a page outside the table of contents, a docstring that is not valid reST), and the
records rendered from committed JSON."""
import importlib.util
import json
from types import SimpleNamespace

import pytest

from .conftest import REPO, run_command, tool_env

pytestmark = pytest.mark.lab  # a check of the maintainers: make test-lab


def test_the_docs_build_without_a_warning(tmp_path):
    done = run_command(['make', '-s', '-C', str(REPO), 'docs', f'DOCS_OUT={tmp_path}'], timeout=600,
                       env=tool_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert (tmp_path / 'index.html').is_file() and (
        tmp_path / 'user_guides' / 'cluster.html'
    ).is_file()


def test_config_readmes_hold_results_and_how_to_run_and_the_family_pages_the_rest():
    """A config folder's README, as mmdet's: what the models are, their results table, the weights
    they start from and how to run them (at most 100 lines); its family's page includes it and holds
    the rest. The README is at most 200 lines."""
    assert len((REPO / 'README.md').read_text().splitlines()) <= 200
    for readme in sorted((REPO / 'configs').glob('*/README.md')):
        family = readme.parent.name
        lines = readme.read_text().splitlines()
        assert len(lines) <= 100 and any(line.startswith('| ') for line in lines), (
            family,
            len(lines),
        )
        page = (REPO / 'docs' / 'families' / f'{family}.md').read_text()
        assert page.startswith(f'```{{include}} ../../configs/{family}/README.md'), family


def records_extension():
    """``docs/_ext/records.py``, the extension that renders the records (a file of the docs, not a
    module)."""
    spec = importlib.util.spec_from_file_location('records_extension',
                                                  REPO / 'docs' / '_ext' / 'records.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_models_record(tmp_path, name: str, when: str, pairs: dict) -> None:
    record = dict(name=name, kind='bench_models', date=when[:10], time=when[11:], commit=name[:7],
                  dirty=False, machine=dict(cpu='CPU', cores=2, python='3.11', torch='2.13'),
                  results=dict(pairs=pairs, batch=2, threads=2))
    (tmp_path / 'bench_models' / f'{name}.json').write_text(json.dumps(record))


def test_each_pair_is_rendered_from_the_newest_record_that_measured_it(tmp_path, monkeypatch):
    """A run of some pairs (``--pairs``) updates theirs alone; a pair no record holds is named; a
    mark naming no records fails the build in one line."""
    from lab.bench import models
    extension = records_extension()
    monkeypatch.setattr(extension, 'RECORDS', tmp_path)
    monkeypatch.setattr(models, 'tables', lambda pairs, batch, threads: ''.join(
        f'{key}: {entry["measured"]}\n' for key, entry in pairs.items()))
    (tmp_path / 'bench_models').mkdir()
    assert extension.bench_models_tables('picodet') == (
        # no record at all
        'Not measured in any record yet: picodet-s-castling, picodet-l-castling.\n')
    bench_models_record(tmp_path, 'aaaaaaa_all', '2026-11-26T10:00:00Z', {
        'upernet-pervit-t': dict(family='pervit', measured='old'),
        'upernet-pervit-s': dict(family='pervit',
                                                                                            measured='old')})
    bench_models_record(tmp_path, 'bbbbbbb_some', '2026-11-27T09:00:00Z', {
        'upernet-pervit-s': dict(family='pervit', measured='new')})
    page = ['# PerViT\n\n<!-- records: bench_models pervit -->\n']
    extension.render(SimpleNamespace(env=SimpleNamespace()), 'families/pervit', page)
    text = page[0]
    assert (
        text.index('commit `bbbbbbb`')
        < text.index('upernet-pervit-s: new')
        < text.index('commit `aaaaaaa`')
    )
    assert 'upernet-pervit-t: old' in text and 'upernet-pervit-s: old' not in text
    assert text.rstrip().endswith('Not measured in any record yet: mask-rcnn-pervit-t, '
                                  'mask-rcnn-pervit-s.')
    with pytest.raises(ValueError,
                       match=r"^families/pervit: '<!-- records: benches -->' names no records; "):
        extension.render(SimpleNamespace(env=SimpleNamespace()), 'families/pervit',
                         ['<!-- records: benches -->'])


def test_each_benchmark_case_is_rendered_from_the_newest_record_that_measured_it(
    tmp_path, monkeypatch
):
    from lab.bench import suite
    extension = records_extension()
    monkeypatch.setattr(extension, 'RECORDS', tmp_path)
    monkeypatch.setattr(
        suite,
        'tables',
        lambda results: ''.join(
            f'{part} {index}: {entry}\n'
            for part in ('ops', 'models')
            for index, entry in results[part].items()
        ),
    )
    (tmp_path / 'bench').mkdir()
    for name, when, ops in (('aaaaaaa_all', '2026-11-27T10:00:00Z', {'0': 'old', '5': 'old'}),
                            ('bbbbbbb_pervit', '2026-11-27T11:00:00Z', {'5': 'new'})):
        record = dict(name=name, kind='bench', date=when[:10], time=when[11:], commit=name[:7],
                      dirty=False, machine=dict(cpu='CPU', cores=2, python='3.11', torch='2.13'),
                      results=dict(ops=ops, models={'0': 'old'} if name.startswith('a') else {}))
        (tmp_path / 'bench' / f'{name}.json').write_text(json.dumps(record))
    text = extension.bench_tables(None)
    assert (
        text.index('commit `bbbbbbb`') < text.index('ops 5: new') < text.index('commit `aaaaaaa`')
    )
    assert 'ops 0: old' in text and 'models 0: old' in text and 'ops 5: old' not in text


def test_each_config_shows_its_newest_arena_with_its_plots(tmp_path, monkeypatch):
    from mmvisattn.analysis import compare_attentions
    extension = records_extension()
    monkeypatch.setattr(extension, 'RECORDS', tmp_path)
    monkeypatch.setattr(compare_attentions, 'table',
                        lambda results: f'table of {results["measured"]}\n')
    (tmp_path / 'arena').mkdir()
    for name, when, config, measured in (
            ('aaaaaaa_vil_arena', '2026-12-01T10:00:00Z', 'configs/vil/a.py', 'old a'),
            ('bbbbbbb_vil_arena', '2026-12-02T10:00:00Z', 'configs/vil/a.py', 'new a'),
            ('ccccccc_vil_arena', '2026-12-01T10:00:00Z', 'configs/vil/b.py', 'b'),
            ('ddddddd_seg_arena', '2026-12-03T10:00:00Z', 'configs/segformer_rwgka/c.py', 'c')):
        record = dict(name=f'{name}.json', kind='arena', date=when[:10], time=when[11:],
                      commit=name[:7], dirty=False,
                      machine=dict(cpu='CPU', cores=2, python='3.11', torch='2.13'),
                      results=dict(config=config, measured=measured))
        (tmp_path / 'arena' / f'{name}.json').write_text(json.dumps(record))
    text = extension.arena_tables('vil')
    assert ('table of new a' in text and 'table of b' in text and 'old a' not in text
            and 'table of c' not in text)
    assert '![cost](/records/arena/bbbbbbb_vil_arena_cost.png)' in text
    with pytest.raises(FileNotFoundError, match='no arena record of a config of configs/smca/'):
        extension.arena_tables('smca')
