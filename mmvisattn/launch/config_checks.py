"""One-line answers to config mistakes, before anything is built or written.

mmengine merges ``--cfg-options`` without checking the keys, and a misspelt key
(``optim_wraper.optimizer.lr``) trains to the end with the default. :func:`check_config` names, with
the dict's path and the nearest right names: a ``--cfg-options`` key the config lacks, a top-level
key a letter or two from a Runner argument, a ``type`` no registry of the scope holds, and an
argument the class does not take (through the signatures its ``**kwargs`` reach by
``super().__init__``). :data:`BUILDER_KEYS` are the builders'; :data:`NOT_REGISTERED` dicts are
skipped."""
import ast
import difflib
import importlib
import inspect
import textwrap
from typing import Any, Iterator, List, Optional, Sequence, Set, Tuple

import torch
from mmengine.config import Config
from mmengine.registry import Registry
from torch import nn

from .process_group import DIST_CFG_KEYS

# keys the builders read rather than the constructor: scope, a norm's requires_grad, an
# initialiser's override, the optimizer wrapper's constructor and paramwise_cfg, a scheduler's
# convert_to_iter_based, a hook's priority
BUILDER_KEYS = frozenset({'type', '_scope_', 'requires_grad', 'override', 'constructor',
                          'paramwise_cfg', 'convert_to_iter_based', 'priority'})
# dicts whose type is looked up outside the registries: mmcv's batched_nms picks the NMS function by
# name, mmdet's RoI extractors take the layer from mmcv.ops
NOT_REGISTERED = frozenset({'nms', 'roi_layer'})
# classes whose **kwargs end the walk up the MRO: they accept nothing beyond their named arguments
CLOSED_BASES = (object, nn.Module)
# top-level keys the Runner reads from its config rather than as arguments (``Runner.wrap_model``,
# ``Runner._maybe_compile``)
RUNNER_CFG_KEYS = frozenset({'compile', 'sync_bn', 'model_wrapper_cfg'})
# difflib ratio: 'optim_wraper' to 'optim_wrapper' is 0.96, 'model' to 'tta_model' 0.71
CLOSE_MATCH = 0.8


def nearest(name: str, candidates: Sequence[str], count: int = 3) -> str:
    """``'; nearest: a, b'`` for the candidates closest to ``name``, or ``''``."""
    found = difflib.get_close_matches(name, sorted(set(candidates)), n=count, cutoff=0.6)
    return f'; nearest: {", ".join(found)}' if found else ''


# the loops the Runner builds from a top-level dict without a ``type``
IMPLIED_LOOPS = {'val_cfg': 'ValLoop', 'test_cfg': 'TestLoop'}


def built_type(path: str, node: dict) -> Optional[str]:
    """The type ``node`` (at config ``path``) builds: its ``type``, or the loop the Runner builds
    from a ``train_cfg``, ``val_cfg`` or ``test_cfg`` without one."""
    if isinstance(node.get('type'), str):
        return node['type']
    if path == 'train_cfg' and 'by_epoch' in node:
        return 'EpochBasedTrainLoop' if node['by_epoch'] else 'IterBasedTrainLoop'
    return IMPLIED_LOOPS.get(path)


def option_arguments(cfg: Config, path: str, node: Any) -> Optional[Set[str]]:
    """The arguments the class ``node`` builds takes (empty: it builds nothing checked here)."""
    if path == 'env_cfg.dist_cfg':
        return set(DIST_CFG_KEYS)  # read by the process group's start, not built
    if path == 'model_wrapper_cfg' or path.rpartition('.')[2] == 'paramwise_cfg':
        return None  # read by whichever model wrapper or optimizer constructor the config names
    built = built_type(path, node) if isinstance(node, dict) else None
    if built is None:
        return set()
    taken = arguments_taken(registered_targets(scope_registries(cfg.default_scope), built))
    return None if taken is None else taken | BUILDER_KEYS


def check_option_keys(cfg: Config, options: dict) -> None:
    """Each ``--cfg-options`` key must name a path of ``cfg`` (list items by index), an argument of
    the class a dict of it builds, or a Runner argument left at its default."""
    root = runner_defaults()
    for name, value in cfg.to_dict().items():
        default = root.get(name)
        root[name] = {**default,
                      **value} if isinstance(default, dict) and isinstance(value, dict) else value
    for key in options:
        node: Any = root
        walked: List[str] = []
        for part in key.split('.'):
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, (list, tuple)) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                arguments = option_arguments(cfg, '.'.join(walked), node)
                if arguments is None or part in arguments:
                    # a new argument of the built class: what lies below it is the class's to check
                    break
                where = (f"'{'.'.join(walked)}' has no '{part}'" if walked
                         else f"the config has no top-level '{part}'")
                existing = (
                    [str(k) for k in node] + sorted(arguments) if isinstance(node, dict) else []
                )
                raise SystemExit(f'error: --cfg-options {key}: {where}{nearest(part, existing)} '
                                 '(pass --cfg-new-keys to add keys the config does not have)')
            walked.append(part)


def runner_arguments() -> Set[str]:
    """The Runner's arguments and the top-level keys it reads from the config itself."""
    from mmengine.runner import Runner
    return set(inspect.signature(Runner.__init__).parameters) - {'self'} | RUNNER_CFG_KEYS


def runner_defaults() -> dict:
    """The Runner arguments a config may leave out, as option paths: ``randomness`` and ``compile``
    take their functions' arguments; the others are leaves."""
    from mmengine.runner import Runner
    nested = dict(randomness=Runner.set_randomness, compile=torch.compile)
    return {name: dict.fromkeys(set(inspect.signature(nested[name]).parameters) - {'self', 'model'})
            if name in nested else None for name in runner_arguments()}


def check_top_level_keys(cfg: Config) -> None:
    """A top-level key that is not a Runner argument but nearly one is a misspelling the Runner
    would ignore: refused."""
    arguments = runner_arguments()
    for key in cfg.keys():
        close = difflib.get_close_matches(key, sorted(arguments), n=3, cutoff=CLOSE_MATCH)
        if key not in arguments and close:
            raise SystemExit(f"error: top-level config key '{key}' is not a Runner argument, and "
                             f"the Runner would ignore it; nearest: {', '.join(close)}")


def scope_registries(scope: str) -> List[Registry]:
    """Every registry of the scope's ``registry`` module (their parents are searched by ``get``),
    and the project's attentions."""
    from mmvisattn.registry import ATTENTIONS
    module = importlib.import_module(f'{scope}.registry')
    return [value for value in vars(module).values() if isinstance(value, Registry)] + [ATTENTIONS]


def lookup(registry: Registry, name: str) -> Optional[type]:
    """``registry.get(name)`` for a plain name, without ``get``'s last resort of importing ``name``
    as a module path (a ``sys.path`` search per registry, most of a check's time)."""
    if '.' in name:
        return registry.get(name)
    registry.import_from_location()
    while registry is not None:
        if name in registry.module_dict:
            return registry.module_dict[name]
        registry = registry.parent
    return None


def registered_targets(registries: Sequence[Registry], name: str) -> List[Any]:
    """What ``name`` is registered as in any of ``registries`` (each class or function once)."""
    return list(
        dict.fromkeys(
            target
            for target in (lookup(registry, name) for registry in registries)
            if target is not None
        )
    )


def registered_names(registries: Sequence[Registry]) -> List[str]:
    names = []
    for registry in registries:
        while registry is not None:
            names += list(registry.module_dict)
            registry = registry.parent
    return names


def forwards_to_super(init: Any, varkw: str) -> bool:
    """Whether ``init`` uses ``**varkw`` only to pass it on to ``super().__init__(...)``."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
    except (OSError, TypeError, SyntaxError):
        return False
    passed_on = []
    for call in ast.walk(tree):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == '__init__'
                and isinstance(call.func.value, ast.Call)
            and getattr(call.func.value.func, 'id', None) == 'super'):
            passed_on += [keyword.value for keyword in call.keywords if keyword.arg is None]
    uses = [node for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id == varkw]
    return bool(uses) and all(any(use is value for value in passed_on) for use in uses)


def keyword_parameters(function: Any) -> Optional[Tuple[Set[str], Optional[str]]]:
    """The names ``function`` takes by keyword (``self`` aside) and the name of its ``**kwargs`` (or
    None), or None for a builtin without a signature."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    varkw = next((p.name for p in parameters if p.kind == inspect.Parameter.VAR_KEYWORD), None)
    return {p.name for p in parameters if p.kind in keyword} - {'self'}, varkw


def accepted_arguments(target: Any) -> Optional[Set[str]]:
    """The keyword arguments a registered class or function takes, or None when its ``**kwargs``
    accept anything (they leave the classes this walk can read)."""
    if not inspect.isclass(target):
        found = keyword_parameters(target)
        return None if found is None or found[1] is not None else found[0]
    names: Set[str] = set()
    for klass in target.__mro__:
        if klass in CLOSED_BASES:
            return names
        if '__init__' not in vars(klass):
            continue
        found = keyword_parameters(vars(klass)['__init__'])
        if found is None:
            return None
        names |= found[0]
        if found[1] is None:
            return names
        if not forwards_to_super(vars(klass)['__init__'], found[1]):
            return None
    return names


def arguments_taken(targets: Sequence[Any]) -> Optional[Set[str]]:
    """The keyword arguments ``targets`` take together, or None when one of them takes anything."""
    accepted = [accepted_arguments(target) for target in targets]
    return None if any(names is None for names in accepted) else set().union(*accepted)


def typed_dicts(node: Any, path: str = '') -> Iterator[Tuple[str, dict]]:
    """``(config path, dict)`` of every dict with a string ``type``, depth first."""
    if isinstance(node, dict):
        if isinstance(node.get('type'), str) and path.rpartition('.')[2] not in NOT_REGISTERED:
            yield path, node
        for key, value in node.items():
            yield from typed_dicts(value, f'{path}.{key}' if path else str(key))
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            yield from typed_dicts(value, f'{path}.{index}')


def check_types_and_arguments(cfg: Config) -> None:
    """Every ``type`` is registered in the config's scope and takes the dict's other keys."""
    registries = scope_registries(cfg.default_scope)
    for path, node in typed_dicts(cfg.to_dict()):
        found = registered_targets(registries, node['type'])
        if not found:
            raise SystemExit(
                f"error: {path}.type '{node['type']}' is not registered in scope "
                f"'{cfg.default_scope}'{nearest(node['type'], registered_names(registries))}"
            )
        takes = arguments_taken(found)
        if takes is None:
            continue
        for key in node:
            if key not in BUILDER_KEYS and key not in takes:
                raise SystemExit(f"error: {path}.{key}: {node['type']} takes no argument '{key}'"
                                 f'{nearest(key, sorted(takes))}')


def check_config(cfg: Config, options: Optional[dict] = None, new_keys: bool = False) -> None:
    """Apply ``--cfg-options`` to ``cfg`` after checking their keys (unless ``new_keys``), then
    check the top-level keys and every ``type`` with its arguments; each mistake exits in one
    line."""
    if options:
        if not new_keys:
            check_option_keys(cfg, options)
        cfg.merge_from_dict(options)
    check_top_level_keys(cfg)
    check_types_and_arguments(cfg)
