"""The documentation site builds as ``make docs`` builds it: every warning an error (a broken link
between pages, a page outside the table of contents, a docstring that is not valid reST)."""
from .conftest import REPO, run_command, tool_env


def test_the_docs_build_without_a_warning(tmp_path):
    done = run_command(['make', '-s', '-C', str(REPO), 'docs', f'DOCS_OUT={tmp_path}'], timeout=600, env=tool_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert (tmp_path / 'index.html').is_file() and (tmp_path / 'user_guides' / 'cluster.html').is_file()


def test_config_readmes_hold_results_and_how_to_run_and_the_family_pages_the_rest():
    """A config folder's README, as mmdet's: what the models are, their results table, the weights they
    start from and how to run them (at most 100 lines); its family's page includes it and holds the rest.
    The README is at most 200 lines."""
    assert len((REPO / 'README.md').read_text().splitlines()) <= 200
    for readme in sorted((REPO / 'configs').glob('*/README.md')):
        family = readme.parent.name
        lines = readme.read_text().splitlines()
        assert len(lines) <= 100 and any(line.startswith('| ') for line in lines), (family, len(lines))
        page = (REPO / 'docs' / 'families' / f'{family}.md').read_text()
        assert page.startswith(f'```{{include}} ../../configs/{family}/README.md'), family
