"""The documentation site builds as ``make docs`` builds it: every warning an error (a broken link
between pages, a page outside the table of contents, a docstring that is not valid reST)."""
from .conftest import REPO, run_command, tool_env


def test_the_docs_build_without_a_warning(tmp_path):
    done = run_command(['make', '-s', '-C', str(REPO), 'docs', f'DOCS_OUT={tmp_path}'], timeout=600, env=tool_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert (tmp_path / 'index.html').is_file() and (tmp_path / 'user_guides' / 'cluster.html').is_file()
