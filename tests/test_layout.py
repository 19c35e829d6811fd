"""The import rules of the layout: outside ``mmvisattn/ops`` nothing imports an op package's
private modules (only what ``mmvisattn/ops/<op>/__init__.py`` exports, the NATTEN /
flash-linear-attention rule), and ``ops`` imports nothing from the rest of the package."""
import ast
import re
from pathlib import Path
from typing import Iterator, Tuple

from .conftest import REPO

PACKAGE = REPO / 'mmvisattn'
SHARED = 'utils'  # mmvisattn/ops/utils: the machinery the op packages share
OP_PACKAGES = sorted(p.parent.name for p in (PACKAGE / 'ops').glob('*/__init__.py')
                     if p.parent.name != SHARED)


def imported_modules(path: Path) -> Iterator[Tuple[int, str]]:
    """``(line, absolute module name)`` of every ``import`` and ``from ... import`` in ``path``;
    for ``from M import name`` both ``M`` and ``M.name`` (a name may be a submodule)."""
    package = '.'.join(path.relative_to(REPO).with_suffix('').parts[:-1])
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                parent = package.split('.')[:len(package.split('.')) - node.level + 1]
                base = '.'.join(parent + ([base] if base else []))
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f'{base}.{alias.name}'


def private_op_module(module: str) -> bool:
    parts = module.split('.')
    return len(parts) >= 4 and parts[:2] == ['mmvisattn', 'ops'] and parts[2] in OP_PACKAGES \
        and (REPO / 'mmvisattn' / 'ops' / parts[2] / f'{parts[3]}.py').is_file()


def test_there_are_op_packages():
    assert {'linear_angular', 'peripheral', 'ripple', 'sliding_chunk'} <= set(OP_PACKAGES)


def test_ops_holds_the_ops_and_one_package_of_what_they_share():
    """``mmvisattn/ops`` lists the ops alone (packages, and ``linearized.py``, an op of one file)
    and the check of their backends against their references (``check.py``); dispatch, autocast
    rules, the kernels' build and the rest of the machinery sit in ``ops/utils``."""
    modules = sorted(p.name for p in (PACKAGE / 'ops').glob('*.py'))
    assert modules == ['__init__.py', 'check.py', 'linearized.py'], modules
    assert (PACKAGE / 'ops' / SHARED / 'dispatch.py').is_file()


def test_nothing_outside_ops_imports_a_private_op_module():
    """The rest of the package, the tools and the lab (its experimental backends included) import an
    op only through its ``__init__.py``."""
    files = [p for p in PACKAGE.rglob('*.py') if 'ops' not in p.relative_to(PACKAGE).parts[:1]]
    files += list((REPO / 'tools').rglob('*.py')) + list((REPO / 'lab').rglob('*.py'))
    found = [f'{path.relative_to(REPO)}:{line} imports {module}' for path in files
             for line, module in imported_modules(path) if private_op_module(module)]
    assert not found, '\n'.join(found)


def test_ops_import_nothing_from_the_rest_of_the_package():
    found = [
        f'{path.relative_to(REPO)}:{line} imports {module}'
        for path in (PACKAGE / 'ops').rglob('*.py')
        for line, module in imported_modules(path)
        if module.startswith('mmvisattn.') and not module.startswith('mmvisattn.ops')
    ]
    assert not found, '\n'.join(found)


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def package_modules() -> dict:
    """``{module name: path}`` of every module of ``mmvisattn``."""
    return {module_name(path): path for path in PACKAGE.rglob('*.py')}


def import_edges(modules: dict) -> dict:
    """``{module: the modules of mmvisattn it names in an import}``, function-level imports included
    (a cycle through a lazy import is still a cycle)."""
    return {
        name: {
            imported
            for _, imported in imported_modules(path)
            if imported in modules and imported != name
        }
        for name, path in modules.items()
    }


def test_no_import_cycle_in_the_package():
    """Depth-first search over the import graph; a back edge is a cycle, reported as its path."""
    edges = import_edges(package_modules())
    state, cycles = {}, []

    def visit(module: str, path: list) -> None:
        state[module] = 'open'
        for target in sorted(edges[module]):
            if state.get(target) == 'open':
                cycles.append(' -> '.join(path[path.index(target):] + [module, target])
                              if target in path
                              else f'{module} -> {target}')
            elif target not in state:
                visit(target, path + [module])
        state[module] = 'done'

    for module in sorted(edges):
        if module not in state:
            visit(module, [])
    assert not cycles, '\n'.join(cycles)


def test_only_tests_the_visualiser_and_the_op_packages_import_a_reference():
    """A ``reference`` module is what the backends are tested against: the op package's ``__init__``
    exports it; no other production module (nor a tool but the visualiser) may build on it."""
    files = list(PACKAGE.rglob('*.py')) + list((REPO / 'tools').rglob('*.py'))
    visualiser = REPO / 'tools' / 'analysis_tools' / 'visualize_attention.py'
    found = []
    for path in files:
        own_package = module_name(path) if path.name == '__init__.py' else None
        for line, module in imported_modules(path):
            if module.split('.')[-1] != 'reference' or not module.startswith('mmvisattn.ops.'):
                continue
            if path == visualiser or module.rsplit('.', 1)[0] == own_package:
                continue
            found.append(f'{path.relative_to(REPO)}:{line} imports {module}')
    assert not found, '\n'.join(found)


# The check of a user's machine compares the backends with their references, as the op tests do
CHECK_TOOLS = ('mmvisattn/ops/check.py',)


def called_names(path: Path) -> Iterator[Tuple[int, str]]:
    """``(line, name)`` of every call of a plain or dotted name in ``path`` (``f(...)``,
    ``m.f(...)``)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
            yield node.lineno, node.func.id if isinstance(node.func, ast.Name) else node.func.attr


def test_no_production_code_calls_a_reference():
    """A ``*_reference`` function runs only inside the references themselves and in the check, which
    compares against them; never on a model's path, imported under whatever name (the import rule
    above sees only ``reference`` modules, not the names an op package exports)."""
    files = list(PACKAGE.rglob('*.py')) + list((REPO / 'tools').rglob('*.py'))
    found = []
    for path in files:
        relative = str(path.relative_to(REPO))
        twin_side = path.name == 'reference.py' or (path.name == '__init__.py'
                                                    and path.parent.parent.name == 'ops')
        if twin_side or relative in CHECK_TOOLS:
            continue
        found += [
            f'{relative}:{line} calls {name}'
            for line, name in called_names(path)
            if name.endswith('_reference')
        ]
    assert not found, '\n'.join(found)


def test_tools_are_front_doors_that_import_no_sibling_and_leave_sys_path_alone():
    """No tool over 400 lines; none imports another tool (what tools share lives in the package,
    ``mmvisattn.analysis``, or the lab) and none edits ``sys.path`` anywhere (a checkout's packages
    go on it only inside ``lab.bench.official_code``)."""
    tools = sorted((REPO / 'tools').rglob('*.py'))
    names = {path.stem for path in tools}
    found = []
    for path in tools:
        text, relative = path.read_text(), path.relative_to(REPO)
        if text.count('\n') > 400:
            found.append(f'{relative}: {text.count(chr(10))} lines')
        found += [
            f'{relative}:{line} imports the tool {module}'
            for line, module in imported_modules(path)
            if module.split('.')[0] in names
        ]
        for node in ast.walk(ast.parse(text)):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == 'path'
                and getattr(node.value, 'id', '') == 'sys'
            ):
                found.append(f'{relative}:{node.lineno} touches sys.path')
    assert not found, '\n'.join(found)


def test_the_tests_mirror_the_package():
    """Every test folder ``tests/test_<a>/test_<b>`` names the package ``mmvisattn/<a>/<b>`` (the
    command-line tools: ``tools/``)."""
    strays = []
    for folder in sorted((REPO / 'tests').rglob('test_*')):
        if not folder.is_dir() or folder.name == '__pycache__':
            continue
        parts = [part[len('test_'):] for part in folder.relative_to(REPO / 'tests').parts]
        mirrored = REPO / 'tools' if parts == ['tools'] else PACKAGE.joinpath(*parts)
        if not (mirrored / '__init__.py').is_file() and mirrored.name != 'tools':
            strays.append(str(folder.relative_to(REPO)))
    assert not strays, strays


# An implementation builds on another one only where it is that one plus something, each edge with
# its reason (docs/advanced/layout.md); anything both need otherwise sits in a module named for what
# it is.
IMPLEMENTATIONS = ('reference', 'pytorch', 'triton', 'cpu', 'dense')
BUILDS_ON = {
    ('linear_angular', 'triton',
     'pytorch'): "the kernel's backward is the torch path's closed form",
}


def test_implementations_build_on_each_other_only_as_the_layout_says():
    found = {}
    for op in OP_PACKAGES:
        for impl in IMPLEMENTATIONS:
            path = PACKAGE / 'ops' / op / f'{impl}.py'
            if not path.is_file():
                continue
            for _, module in imported_modules(path):
                parts = module.split('.')
                if parts[:3] == ['mmvisattn', 'ops',
                                 op] and len(parts) == 4 and parts[3] in IMPLEMENTATIONS \
                        and parts[3] != impl:
                    found[(op, impl, parts[3])] = True
    assert set(found) == set(BUILDS_ON), sorted(set(found) ^ set(BUILDS_ON))


LAB = REPO / 'lab'


def test_the_package_leaves_the_lab_and_the_checkout_alone():
    """No module of the package imports the lab (or the tests), finds the repository by path (a
    ``parents[k]`` from ``__file__`` leaving the package) or names a file of the checkout's
    ``tools/`` or ``docs/`` (config names are resolved by ``mmvisattn.configs``, in the package's
    own copy)."""
    found = []
    for path in sorted(PACKAGE.rglob('*.py')):
        relative = path.relative_to(REPO)
        tree = ast.parse(path.read_text())
        for line, module in imported_modules(path):
            if module.split('.')[0] in ('lab', 'tests'):
                found.append(f'{relative}:{line} imports {module}')
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                      and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == 'parents' and isinstance(node.slice, ast.Constant):
                if not path.parents[node.slice.value].is_relative_to(PACKAGE):
                    found.append(f'{relative}:{node.lineno} reaches '
                                 f'{path.parents[node.slice.value]} by path')
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and node.value.startswith(('tools/', 'docs/'))
                and '.' in node.value.split()[0]
            ):
                found.append(f'{relative}:{node.lineno} names the checkout file '
                             f'{node.value.split()[0]}')
    assert not found, '\n'.join(found)


def test_the_layout_page_names_every_module():
    """``docs/advanced/layout.md`` names every module of the package and of the lab by its file
    name, and every subpackage by its path."""
    page = (REPO / 'docs' / 'advanced' / 'layout.md').read_text()
    modules = {path.name for root in (PACKAGE, LAB) for path in root.rglob('*.py')
               if path.name != '__init__.py'}
    folders = {str(path.parent.relative_to(REPO)) for path in PACKAGE.rglob('__init__.py')} | {
        'lab'
    }
    missing = sorted(name for name in modules | folders if name not in page)
    assert not missing, f'docs/advanced/layout.md does not name {missing}'


def named_in(path: Path, name: str) -> bool:
    """Whether the module at ``path`` defines, assigns or imports ``name``."""
    return re.search(rf'^\s*(def|class)\s+{name}\b|^\s*{name}\s*[:=]|^\s*from .* import '
                     rf'.*\b{name}\b|^\s+{name}\s*[,)]', path.read_text(), re.M) is not None


def test_every_module_the_docs_name_exists():
    """Each dotted name of the package or the lab in the README, the docs and the config READMEs is
    a module of the tree, or a name one of them defines."""
    pages = [REPO / 'README.md', *(REPO / 'docs').rglob('*.md'),
             *(REPO / 'configs').glob('*/README.md')]
    missing = []
    for page in pages:
        for name in sorted(set(re.findall(r'(?<![\w/.])((?:mmvisattn|lab)(?:\.\w+)+)',
                                          page.read_text()))):
            parts = name.split('.')
            found = next(((REPO.joinpath(*parts[:i]), parts[i:]) for i in range(len(parts), 0, -1)
                          if REPO.joinpath(*parts[:i]).with_suffix('.py').is_file()
                          or (REPO.joinpath(*parts[:i]) / '__init__.py').is_file()))
            base, rest = found
            module = (
                base.with_suffix('.py')
                if base.with_suffix('.py').is_file()
                else base / '__init__.py'
            )
            if rest and not named_in(module, rest[0]):
                missing.append(f'{page.relative_to(REPO)}: {name}')
    assert not missing, missing
