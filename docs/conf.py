"""Sphinx configuration of the documentation site: ``make docs`` builds it into ``work_dirs/docs``
with every warning an error (a broken internal link, a page outside the table of contents, a
docstring that is not valid reST)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / '_ext'))  # this folder's own extensions (records.py)

project = 'mmvisattn'
author = 'the mmvisattn developers'
# the docstrings are Google style (Args:, Returns:), as mmdet's and mmseg's
extensions = ['myst_parser', 'sphinx.ext.autodoc', 'sphinx.ext.napoleon', 'records']
source_suffix = {'.md': 'markdown'}
root_doc = 'index'
exclude_patterns = ['records/gpu', 'records/tests', '_ext']
# links between pages are checked: a missing target is an error
myst_heading_anchors = 3
myst_enable_extensions = ['colon_fence']
html_theme = 'alabaster'
html_title = 'mmvisattn'
autodoc_member_order = 'bysource'
autodoc_typehints = 'description'
# the API pages import the package (and mmdet, mmseg) as a user's Python does
autodoc_mock_imports = []
