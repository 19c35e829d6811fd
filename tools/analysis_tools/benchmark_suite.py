"""The side-by-side benchmark of the README (``make bench``): every attention of the project beside
torch SDPA, mmseg's spatial-reduction attention (SRA) and, given ``--peers``, the official modules;
then whole models end to end.

    python tools/analysis_tools/benchmark_suite.py [--peers PEERS_DIR] [--out-dir work_dirs/bench]
        [--only ops memory models] [--rounds 25]

``PEERS_DIR`` holds checkouts of the official repositories named ``owner+name``
(``microsoft+vision-longformer``, ``GATECH-EIC+Castling-ViT``, ``juhongm999+pervit``), imported at
run time only; without it the official columns are left out.

* **Time** (CPU, 2 threads): forward + backward of ``out.sum()``. For each grid one process builds
  the op and its peers and runs them in rounds, alternating the order every round (ours first,
  then last); the ratio is the median of the per-round ratios ours / peer, the times the medians.
* **Memory**: the growth of the peak resident set over one forward + backward, each module and
  grid in a fresh process, measured after the module and input exist and after a step on an
  8x8 map (which allocates the libraries' workspaces, the same for every module), one per path
  of an op with a dense form (``auto`` takes that one on so small a map).
* **Models**: one image, inference (``model._forward``, the raw head outputs; the backbone alone
  beside it), paired in rounds the same way against the first model of the group.

Prints the tables (Markdown, as the README carries them), writes ``results.json``, ``tables.md``
and ``bench.png`` into ``--out-dir``; with ``--readme README.md`` (``make bench``) it also replaces
the README's tables between the two marker comments, and nothing else of the file. About 20
minutes on two cores.
"""
import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / 'tools' / 'misc')]  # this checkout's package, its fixture loaders

SDPA = 'SoftmaxAttention'
SRA = 'mmseg.models.backbones.mit.EfficientMultiheadAttention:sr_ratio=8'
BEGIN, END = '<!-- benchmark_suite.py: begin -->', '<!-- benchmark_suite.py: end -->'
WARM_UP_GRID = 8  # grid of the step that precedes each memory measurement
OFFICIAL_REPOS = {'vil': 'microsoft+vision-longformer', 'castling': 'GATECH-EIC+Castling-ViT',
                  'pervit': 'juhongm999+pervit'}


@dataclass
class OpCase:
    """One op of the project against its peers: ``ours`` and ``peers`` map a column label to a
    module spec (``benchmark_attention.py``'s ``NAME:key=value`` or ``official:NAME``)."""
    key: str
    title: str
    ours: Dict[str, str]
    peers: Dict[str, str]
    grids: Tuple[int, ...]
    dims: int = 96
    heads: int = 3
    batch: int = 2
    memory_peers: Tuple[str, ...] = ('SDPA',)


OP_CASES = (
    OpCase('vil', 'ViL (w 7, one global token)',
           {'ViL': 'LongformerAttention:window=7,num_global=1',
            'ViL, official settings': 'LongformerAttention:window=7,num_global=1,share_global_weights=False,'
                                      'qkv_bias=False'},
           {'SDPA': SDPA, 'official': 'official:vil'}, (28, 56, 112), memory_peers=('SDPA', 'official')),
    OpCase('ripple', 'Ripple (R 4 and 8)',
           {'Ripple R4': 'RippleAttention:r_max=4', 'Ripple R8': 'RippleAttention:r_max=8'}, {'SDPA': SDPA},
           (32, 64, 128)),
    OpCase('rwgka', 'RWGKA (64 anchors)', {'RWGKA': 'RWGKAttention'}, {'SDPA': SDPA}, (28, 56, 112)),
    OpCase('rwgka-mit-b0', 'RWGKA, MiT-B0 stage 1 (32 dims, one head, batch 1)', {'RWGKA': 'RWGKAttention'},
           {'SRA r8 (mmseg)': SRA}, (64, 128, 256), dims=32, heads=1, batch=1, memory_peers=('SRA r8 (mmseg)',)),
    OpCase('castling', 'Castling (linear-angular, deploy form)', {'Castling': 'LinearAngularAttention'},
           {'SDPA': SDPA, 'official': 'official:castling'}, (28, 56, 112)),
    OpCase('pervit', 'PerViT (peripheral; position MLP every call, as in training, and Phi_p frozen, as cached '
           'in eval)', {'PerViT': 'PeripheralAttention',
                        'PerViT, Phi_p frozen': 'PeripheralAttention:freeze_position=True'},
           {'SDPA': SDPA, 'official': 'official:pervit'}, (14, 28, 56)),
)


@dataclass
class ModelGroup:
    """Whole models on one input size; ratios against the first model."""
    key: str
    title: str
    configs: Dict[str, str]
    shape: Tuple[int, int]
    rounds: int = 5


MODEL_GROUPS = (
    ModelGroup('retinanet', 'RetinaNet', {
        'R18': 'mmdet::retinanet/retinanet_r18_fpn_1x_coco.py',
        'PVT-T': 'mmdet::pvt/retinanet_pvt-t_fpn_1x_coco.py',
        'Swin-T': 'mmdet::swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py',
        'ViL-T': 'configs/vil/retinanet_vil-tiny_fpn_1x_coco.py'}, (800, 1344)),
    ModelGroup('segformer', 'SegFormer', {
        'SegFormer-B0': 'mmseg::segformer/segformer_mit-b0_8xb1-160k_cityscapes-1024x1024.py',
        'SegFormer-B0-RWGKA': 'configs/segformer_rwgka/segformer_mit-b0-rwgka_8xb1-160k_cityscapes-1024x1024.py'},
        (1024, 2048), rounds=3),
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--peers', type=Path, help='folder of owner+name checkouts of the official repositories')
    parser.add_argument('--only', nargs='+', choices=('ops', 'memory', 'models'), default=['ops', 'memory', 'models'])
    parser.add_argument('--rounds', type=int, default=25, help='paired rounds per op and grid (at most; '
                        'small grids run them all, large ones stop at --budget)')
    parser.add_argument('--budget', type=float, default=40, help='seconds of rounds per op and grid (at least 3)')
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--cases', nargs='+', metavar='KEY', help='op and model keys to run (default: all): '
                        + ', '.join(c.key for c in OP_CASES + MODEL_GROUPS))
    parser.add_argument('--grids', type=int, nargs='+', help='one list of grid sides for every op (a quick run)')
    parser.add_argument('--shape', type=int, nargs=2, metavar=('H', 'W'), help='one input size for every model')
    parser.add_argument('--out-dir', type=Path, default=Path('work_dirs/bench'))
    parser.add_argument('--readme', type=Path, help=f'also replace the tables between {BEGIN!r} and {END!r} '
                        'in this file (the README), nothing else of it')
    parser.add_argument('--child', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = set(args.cases or ()) - {c.key for c in OP_CASES + MODEL_GROUPS}
    if unknown:
        parser.error(f'--cases {sorted(unknown)}: expected keys among '
                     f'{[c.key for c in OP_CASES + MODEL_GROUPS]}')
    if args.readme is not None:
        check_markers(args.readme, parser.error)
    if args.peers is not None and not args.peers.is_dir():
        parser.error(f'--peers {args.peers}: not a folder')
    needing_einops = [key for key in ('vil', 'pervit') if key in (args.cases or OFFICIAL_REPOS)]
    if args.peers is not None and needing_einops and importlib.util.find_spec('einops') is None:
        parser.error(f'--peers: the official {" and ".join(needing_einops)} code imports einops; install it with '
                     '`pip install einops`')
    return args


# ------------------------------------------------------------------ building the modules
def official_attention(name: str, peers: Path, dims: int, heads: int, grid: int):
    """The official module ``name`` and its call ``x -> out`` on a ``grid x grid`` map."""
    import torch.nn as nn
    from make_official_fixtures import cuda_calls_stay_on_cpu, import_file, stub_timm
    root = peers / OFFICIAL_REPOS[name]
    if not root.is_dir():
        raise SystemExit(f'benchmark_suite: {root} is missing (check out {OFFICIAL_REPOS[name]} there)')
    stub_timm()
    if name == 'vil':
        layers = root / 'src' / 'models' / 'layers'
        longformer = import_file('vil_layers.longformer2d', layers / 'longformer2d.py', package_dir=layers)
        module = longformer.Long2DSCSelfAttention(dims, num_heads=heads, w=7, nglo=1, rpe=True, exact=0)
        return module, lambda x: module(x, grid, grid), 1
    if name == 'castling':
        attention = import_file('castling_attention', root / 'attention.py')
        module = attention.LinAngularAttention(dims, num_heads=heads)
        return module, module, 0
    sys.path.insert(0, str(root))
    import torch
    from model.pervit import MPA
    from model.utils import OffsetGenerator
    with cuda_calls_stay_on_cpu():
        OffsetGenerator.initialize(grid, pad_size=2)
        distances = OffsetGenerator.get_qk_vec().norm(p=2, dim=-1, keepdim=True)
        module = MPA(dims, heads, qkv_bias=False, norm_init=torch.tensor([0.0, 1.0]))
    module.rpe_proj = nn.Linear(1, 4 * heads)
    return module, lambda x: module(x, module.rpe_proj(distances)), 0


def attention_module(spec: str, dims: int, heads: int, grid: int, peers: Optional[Path]):
    """``(module, call, extra tokens)`` for a spec; project modules switched to deploy."""
    if spec.startswith('official:'):
        return official_attention(spec.split(':', 1)[1], peers, dims, heads, grid)
    from benchmark_attention import build_module, parse_type
    module = build_module(parse_type(spec), dims, heads)
    if hasattr(module, 'switch_to_deploy'):
        module.switch_to_deploy()
    return module, lambda x: module(x, (grid, grid)), getattr(module, 'num_extra_tokens', 0)


def training_step(spec: str, case: OpCase, grid: int, peers: Optional[Path],
                  impl: Optional[str] = None) -> Callable[[], None]:
    """One forward + backward of the module of ``spec``; ``impl`` overrides the op path of a project
    module that has one."""
    import torch
    module, call, extra = attention_module(spec, case.dims, case.heads, grid, peers)
    module.train()
    if impl is not None and impl in getattr(module, 'impls', ()):
        module.impl = impl
    x = torch.randn(case.batch, extra + grid * grid, case.dims, requires_grad=True)

    def step() -> None:
        call(x).sum().backward()
    return step


# ------------------------------------------------------------------ measuring (child processes)
def paired_rounds(steps: Dict[str, Callable[[], None]], rounds: int, budget: float) -> Dict[str, List[float]]:
    """Seconds of every step per round, the order reversed every other round; one warm-up each.
    Rounds stop at ``rounds`` or once ``budget`` seconds are spent (never fewer than three)."""
    for step in steps.values():
        step()
    times = {label: [] for label in steps}
    order = list(steps)
    started = time.perf_counter()
    for index in range(rounds):
        for label in order if index % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            steps[label]()
            times[label].append(time.perf_counter() - start)
        if index >= 2 and time.perf_counter() - started > budget:
            break
    return times


def median_ratio(times: Sequence[float], peer_times: Sequence[float]) -> float:
    """The median of the per-round ratios."""
    return statistics.median(a / b for a, b in zip(times, peer_times))


def ratio_summary(times: Dict[str, List[float]], ratios: Dict[str, Tuple[str, str]]) -> Dict[str, object]:
    """Median times in ms and, for each ``name: (label, peer label)`` of ``ratios``, the median ratio."""
    return {'ms': {label: 1e3 * statistics.median(t) for label, t in times.items()},
            'ratio': {name: median_ratio(times[mine], times[peer]) for name, (mine, peer) in ratios.items()},
            'rounds': len(next(iter(times.values())))}


def runnable(specs: Dict[str, str], peers: Optional[str]) -> Dict[str, str]:
    """``specs`` without the official modules when no ``--peers`` folder was given."""
    return {label: spec for label, spec in specs.items() if peers or not spec.startswith('official:')}


def peak_growth_mb(run: Callable[[], object]) -> Dict[str, float]:
    """Growth of the process's peak resident set while ``run()`` runs."""
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run()
    return {'peak_mb': (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024}


def child_time(payload: dict) -> dict:
    import torch
    case, grid, peers = OP_CASES[payload['case']], payload['grid'], payload['peers']
    labels = {**case.ours, **runnable(case.peers, peers)}
    peers = Path(peers) if peers else None
    steps = {}
    for label, spec in labels.items():
        torch.manual_seed(0)
        steps[label] = training_step(spec, case, grid, peers)
    times = paired_rounds(steps, payload['rounds'], payload['budget'])
    return ratio_summary(times, {f'{mine} / {peer}': (mine, peer) for mine in case.ours
                                 for peer in labels if peer not in case.ours})


def child_memory(payload: dict) -> dict:
    import torch
    torch.manual_seed(0)
    case = OP_CASES[payload['case']]
    peers = Path(payload['peers']) if payload['peers'] else None
    # one step on a small map first: the libraries' lazily allocated workspaces (BLAS, thread pools;
    # 10-40 MB on the first call of some ops; 20-25 MB for loading the C++ kernels and
    # torch.utils.cpp_extension) are not the op's memory. On a map that small 'auto' takes an op's
    # dense form, so the linear paths, which the benchmark grids take, warm up too.
    for impl in ('torch', 'cpu', None):
        training_step(payload['spec'], case, WARM_UP_GRID, peers, impl)()
    return peak_growth_mb(training_step(payload['spec'], case, payload['grid'], peers))


def build_model(config: str):
    """The model of a project config or a stock one (``mmdet::`` / ``mmseg::``), random weights."""
    from benchmark_inference import load_config

    from mmvisattn.registry import build_from_config
    return build_from_config(load_config(config)).eval()


def child_models(payload: dict) -> dict:
    import torch
    group = MODEL_GROUPS[payload['group']]
    images = torch.randn(1, 3, *payload['shape'])
    steps = {}
    for label, config in group.configs.items():
        torch.manual_seed(0)
        model = build_model(config)
        steps[label] = (lambda m: lambda: m._forward(images))(model)
        steps[f'{label} backbone'] = (lambda m: lambda: m.backbone(images))(model)
    with torch.no_grad():
        times = paired_rounds(steps, group.rounds, float('inf'))
    first = next(iter(group.configs))
    ratios = {}
    for label in group.configs:  # each model against the first, each backbone against the first one's
        ratios[label] = (label, first)
        ratios[f'{label} backbone'] = (f'{label} backbone', f'{first} backbone')
    return ratio_summary(times, ratios)


def child_model_memory(payload: dict) -> dict:
    import torch
    group = MODEL_GROUPS[payload['group']]
    model = build_model(group.configs[payload['label']])
    images = torch.randn(1, 3, *payload['shape'])
    with torch.no_grad():
        return peak_growth_mb(lambda: model._forward(images))


MEMORY_KINDS = ('memory', 'model_memory')
CHILDREN = {'time': child_time, 'memory': child_memory, 'models': child_models, 'model_memory': child_model_memory}


def in_child(kind: str, **payload) -> dict:
    """Run ``CHILDREN[kind](payload)`` in a fresh interpreter; a failure becomes ``{'error': ...}``.
    For memory, glibc's allocator maps every block of 128 KiB or more on its own and unmaps it
    when freed (a fixed threshold instead of its adaptive one), so the peak resident set follows
    the tensors alive, not the allocator's history (timings run with the default, which is faster)."""
    command = [sys.executable, __file__, '--child', json.dumps(dict(payload, kind=kind))]
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_='131072') if kind in MEMORY_KINDS else None
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith('{')]
    if done.returncode or not lines:
        last = (done.stderr.strip().splitlines() or [f'exit code {done.returncode}'])[-1]
        return {'error': last[:200]}
    return json.loads(lines[-1])


# ------------------------------------------------------------------ tables
def _fmt(value: Optional[float], unit: str = '') -> str:
    if value is None:
        return '-'
    return f'{value:.2f}x' if unit == 'x' else f'{value:,.0f}{unit}' if value >= 100 else f'{value:.1f}{unit}'


def _measured(items: Sequence, results: Dict[str, dict]):
    """``(item, its results)`` for the items of ``OP_CASES`` or ``MODEL_GROUPS`` that were run."""
    return [(item, results[str(index)]) for index, item in enumerate(items) if str(index) in results]


def op_tables(results: Dict[str, dict]) -> List[str]:
    lines = []
    for case, entry in _measured(OP_CASES, results):
        lines += ['', f'**{case.title}**: {case.dims} dims, {case.heads} heads, batch {case.batch}; forward + '
                  'backward ms (median), ratio ours / peer (median of per-round ratios), peak memory growth MB', '']
        timed = [t for t in entry['time'].values() if 'error' not in t]
        labels = list(timed[0]['ms']) if timed else []
        ratios = list(timed[0]['ratio']) if timed else []
        measured = {label for row in entry['memory'].values() for label in row}
        memory_peers = [p for p in case.memory_peers if p in measured]
        memory_labels = [label for label in case.ours if label in measured] + memory_peers
        header = ['grid'] + [f'{label} ms' for label in labels] + ratios + [f'{label} MB' for label in memory_labels]
        header += [f'{mine} MB / {peer} MB' for mine in case.ours for peer in memory_peers]
        lines += ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
        for grid in entry['grids']:
            timing = entry['time'].get(str(grid), {})
            memory = entry['memory'].get(str(grid), {})
            if 'error' in timing:
                lines.append(f'| {grid}x{grid} | error: {timing["error"]} |')
                continue
            row = [f'{grid}x{grid}'] + [_fmt(timing.get('ms', {}).get(label)) for label in labels]
            row += [_fmt(timing.get('ratio', {}).get(r), 'x') for r in ratios]
            row += [_fmt(memory.get(label, {}).get('peak_mb')) for label in memory_labels]
            for mine in case.ours:
                for peer in memory_peers:
                    mb, peer_mb = memory.get(mine, {}).get('peak_mb'), memory.get(peer, {}).get('peak_mb')
                    row.append(_fmt(mb / peer_mb if mb is not None and peer_mb else None, 'x'))
            lines.append('| ' + ' | '.join(row) + ' |')
    return lines


def model_tables(results: Dict[str, dict]) -> List[str]:
    lines = []
    for group, entry in _measured(MODEL_GROUPS, results):
        if 'error' in entry['time']:
            lines += ['', f'**{group.title}**: error: {entry["time"]["error"]}']
            continue
        first = next(iter(group.configs))
        height, width = entry['shape']
        lines += ['', f'**{group.title} at {height}x{width}**, one image, inference (raw head outputs), CPU '
                  f'{entry["threads"]} threads; ratios against {first} (median of per-round ratios)', '',
                  '| model | whole ms | ratio | backbone ms | ratio | peak memory growth MB |',
                  '|---|---|---|---|---|---|']
        timing = entry['time']
        for label in group.configs:
            backbone = f'{label} backbone'
            lines.append(f'| {label} | {_fmt(timing["ms"][label])} | {_fmt(timing["ratio"][label], "x")} | '
                         f'{_fmt(timing["ms"].get(backbone))} | {_fmt(timing["ratio"].get(backbone), "x")} | '
                         f'{_fmt(entry["memory"].get(label, {}).get("peak_mb"))} |')
    return lines


def plot(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    from benchmark_attention import log_axes, save_figure
    cases = _measured(OP_CASES, results['ops'])
    figure, axes = plt.subplots(1, max(1, len(cases)), figsize=(4 * max(1, len(cases)), 3.6), squeeze=False)
    for axis, (case, entry) in zip(axes[0], cases):
        for label in list(case.ours) + list(case.peers):
            points = [(g * g, entry['time'][str(g)]['ms'][label]) for g in entry['grids']
                      if label in entry['time'].get(str(g), {}).get('ms', {})]
            if points:
                axis.plot(*zip(*points), marker='o', label=label)
        log_axes(axis, 'forward + backward, ms', title=case.title.split(' (')[0])
        axis.legend(fontsize=7)
    save_figure(figure, path)


def check_markers(readme: Path, error: Callable[[str], None]) -> str:
    """The text of ``readme``, which must hold :data:`BEGIN` and, after it, :data:`END` once each."""
    text = readme.read_text() if readme.is_file() else None
    if text is None or text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        error(f'--readme {readme}: expected a file holding the lines {BEGIN!r} and {END!r}, once each and in order')
    return text


def update_readme(readme: Path, tables: str) -> None:
    """Replace what lies between the markers of ``readme`` by ``tables`` (written to a temporary file
    beside it, then renamed over it, so an interrupted run leaves the old README whole)."""
    text = check_markers(readme, lambda message: sys.exit(f'benchmark_suite: {message}'))
    head, rest = text.split(BEGIN)
    tail = rest.split(END)[1]
    scratch = readme.with_name(f'.{readme.name}.benchmark_suite')
    scratch.write_text(f'{head}{BEGIN}\n{tables}{END}{tail}')
    scratch.replace(readme)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        import torch
        payload = json.loads(args.child)
        torch.set_num_threads(payload['threads'])
        print(json.dumps(CHILDREN[payload.pop('kind')](payload)))
        return
    peers = str(args.peers.resolve()) if args.peers else None
    common = dict(threads=args.threads, peers=peers)
    results: Dict[str, dict] = {'settings': {'threads': args.threads, 'peers': peers, 'rounds': args.rounds},
                                'ops': {}, 'models': {}}
    started = time.perf_counter()
    for index, case in enumerate(OP_CASES):
        if args.cases and case.key not in args.cases:
            continue
        grids = args.grids or case.grids
        entry = results['ops'].setdefault(str(index), {'title': case.title, 'grids': grids, 'time': {}, 'memory': {}})
        for grid in grids:
            if 'ops' in args.only:
                entry['time'][str(grid)] = in_child('time', case=index, grid=grid, rounds=args.rounds,
                                                    budget=args.budget, **common)
            if 'memory' in args.only:
                specs = {**case.ours, **{p: case.peers[p] for p in case.memory_peers}}
                entry['memory'][str(grid)] = {label: in_child('memory', case=index, grid=grid, spec=spec, **common)
                                              for label, spec in runnable(specs, peers).items()}
            print(f'[{time.perf_counter() - started:6.0f} s] {case.title.split(" (")[0]} {grid}x{grid}',
                  file=sys.stderr, flush=True)
    if 'models' in args.only:
        for index, group in enumerate(MODEL_GROUPS):
            if args.cases and group.key not in args.cases:
                continue
            shape = args.shape or group.shape
            results['models'][str(index)] = {
                'title': group.title, 'shape': shape, 'threads': args.threads,
                'time': in_child('models', group=index, shape=shape, **common),
                'memory': {label: in_child('model_memory', group=index, label=label, shape=shape, **common)
                           for label in group.configs}}
            print(f'[{time.perf_counter() - started:6.0f} s] {group.title} at {shape[0]}x{shape[1]}', file=sys.stderr,
                  flush=True)
    results['seconds'] = time.perf_counter() - started
    text = '\n'.join(op_tables(results['ops']) + model_tables(results['models'])).strip() + '\n'
    print(text)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / 'results.json').write_text(json.dumps(results, indent=2))
    (args.out_dir / 'tables.md').write_text(text)
    plot(results, args.out_dir / 'bench.png')
    print(f'wrote {args.out_dir}/results.json, tables.md and bench.png in {results["seconds"]:.0f} s')
    if args.readme is not None:
        update_readme(args.readme, text)
        print(f'replaced the tables of {args.readme}')


if __name__ == '__main__':
    main()
