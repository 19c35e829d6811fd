"""The attention arena: attentions compared inside one model of a config, on equal footing.

    python tools/analysis_tools/compare_attentions.py CONFIG [--attentions A B ...] [--seeds 0 1 2]
        [--iters N] [--device cpu|cuda] [--sizes 64 128 192 256] [--batch 2] [--threads T] [--jobs
        J] [--out-dir DIR] [--record-dir DIR]

Each attention (``NAME`` or ``NAME:key=value,...`` of ``ATTENTIONS``; by default every registered
one) replaces every attention of the model (each ``attention_args`` entry of our backbones, any
``attn_cfg`` naming an attention), set by nothing but the spec; the backbone passes its extra tokens
and stage settings (:mod:`mmvisattn.models.attentions.base`). Every attention gets the same recipe,
data and seeds, and each part is measured in a process of its own:

* parameters, and multiply-accumulates at the test input size after ``switch_to_deploy()``;
* forward + backward time and peak memory of the backbone (else the model) on ``--batch`` images of
  each of ``--sizes``, with exponents fitted against the tokens of the largest map;
* the task metric after the recipe shortened to ``--iters`` (schedulers scaled alike), per seed,
  with mean and spread.

Results are kept per part under ``--out-dir``: a rerun skips what is done and refuses a folder of
other settings. Costs run one at a time, then ``--jobs`` trainings side by side (``--threads``
each). ``arena.json``, ``cost.png`` and ``metric.png`` go there, and with ``--record-dir`` the
stamped record (:mod:`.records`) and its plots."""
import argparse
import copy
import json
import os
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from . import timing
from .benchmark_attention import fitted_exponent, log_axes, parse_type, save_figure
from .input_size import test_input_size
from .processes import run_logged

METRIC_KEYS = ('coco/bbox_mAP', 'mIoU', 'accuracy/top1')
DEFAULT_SIZES = (64, 128, 192, 256)
TRAIN_LOADERS = ('train_dataloader', 'val_dataloader')
Slot = Tuple[object, ...]  # the keys from the model config down to an attention's config


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config',
                        help='a detection or segmentation config whose model holds attentions')
    parser.add_argument('--attentions', nargs='+', help='NAME or NAME:key=value,... of ATTENTIONS '
                        '(default: every registered attention)')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2],
                        help='one training run per seed')
    parser.add_argument('--iters', type=int,
                        help="training iterations (default: the config's own); the "
                        "schedulers' steps are scaled alike")
    parser.add_argument('--device', choices=('cpu', 'cuda'),
                        help='default: cuda where there is one')
    parser.add_argument('--sizes', type=int, nargs='+', default=list(DEFAULT_SIZES),
                        help='square image sides of the cost curve (at least two)')
    parser.add_argument('--batch', type=int, default=2, help='images per step of the cost curve')
    parser.add_argument('--repeats', type=int, default=3,
                        help='timed steps per size (after one warm-up)')
    parser.add_argument('--threads', type=int,
                        help='torch CPU threads of each run (default: torch\'s)')
    parser.add_argument('--jobs', type=int, default=1,
                        help='training runs side by side (default: 1)')
    parser.add_argument('--timeout', type=float, default=3600, help='seconds allowed for one part')
    parser.add_argument('--out-dir', type=Path,
                        help='default: work_dirs/compare_attentions/<config name>')
    parser.add_argument('--record-dir', type=Path,
                        help='also write the stamped record and its plots here '
                        '(the repository keeps its own in docs/records/arena)')
    parser.add_argument('--child', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return args
    if len(set(args.sizes)) < 2 or min(args.sizes) < 1:
        parser.error(f'--sizes takes at least two distinct positive sides, got {args.sizes}')
    if min(args.seeds,
           default=-1) < 0 or (args.iters is not None and args.iters < 1) or args.batch < 1 \
            or args.repeats < 1 or args.jobs < 1:
        parser.error('--seeds take non-negative integers; --iters, --batch, --repeats and --jobs '
                     'positive ones')
    if args.device is None:
        import torch
        args.device = 'cuda' if torch.cuda.is_available() else 'cpu'
    if args.out_dir is None:
        args.out_dir = Path('work_dirs/compare_attentions') / Path(args.config).stem
    return args


def attention_slots(model_cfg: dict, registry) -> List[Slot]:
    """Where the model config holds attentions: the keys of ``attention_args`` of each backbone of
    the project (set or not), and each ``attn_cfg`` that names a type of ``ATTENTIONS``."""
    from mmvisattn.registry import ATTENTIONS
    slots: List[Slot] = []

    def walk(node, path: Slot) -> None:
        if isinstance(node, (list, tuple)):
            for index, value in enumerate(node):
                walk(value, path + (index,))
        if not isinstance(node, dict):
            return
        cls = registry.get(node['type']) if isinstance(node.get('type'), str) else None
        args = getattr(cls, 'attention_args', ())
        slots.extend(path + (arg,) for arg in args)
        for key, value in node.items():
            named = (
                key == 'attn_cfg'
                and isinstance(value, dict)
                and value.get('type') in ATTENTIONS.module_dict
            )
            if named and key not in args:
                slots.append(path + (key,))
            elif key not in args:
                walk(value, path + (key,))

    walk(model_cfg, ())
    return slots


def measured_part(slots: Sequence[Slot]) -> str:
    """``'backbone'`` where every attention is the backbone's, else ``'model'``."""
    return 'backbone' if all(slot[0] == 'backbone' for slot in slots) else 'model'


def with_attention(cfg, spec: str):
    """A copy of ``cfg`` whose every attention slot holds the attention ``spec`` describes."""
    from mmvisattn.registry import attention_class, models_of_scope
    attn_cfg = parse_type(spec)
    try:
        attention_class(attn_cfg)
    except KeyError as exc:
        raise SystemExit(f'error: --attentions {spec}: {exc.args[0]}') from None
    cfg = copy.deepcopy(cfg)
    slots = attention_slots(cfg.model, models_of_scope(cfg.default_scope))
    if not slots:
        raise SystemExit('error: the model holds no attention to swap (no backbone of the project '
                         'with attention_args, no attn_cfg naming an attention)')
    for slot in slots:
        node = cfg.model
        for key in slot[:-1]:
            node = node[key]
        node[slot[-1]] = dict(attn_cfg)
    return cfg


def shortened(cfg, iters: Optional[int]):
    """``cfg`` trained for ``iters`` iterations (default: its own), validated once at the end, its
    schedulers scaled alike, no checkpoint kept."""
    train_cfg = cfg.train_cfg
    if 'max_iters' not in train_cfg:
        raise SystemExit(f'error: train_cfg={dict(train_cfg)!r}; the arena expects an '
                         'iteration-based schedule (max_iters)')
    full = train_cfg.max_iters
    iters = iters or full
    scale = iters / full
    train_cfg.update(max_iters=iters, val_interval=iters)
    schedulers = cfg.get('param_scheduler') or []
    for scheduler in schedulers if isinstance(schedulers, list) else [schedulers]:
        if scheduler.get('by_epoch', True) is False:
            begin = round(scheduler.get('begin', 0) * scale)
            scheduler['begin'] = begin
            if scheduler.get('end', float('inf')) < float('inf'):
                scheduler['end'] = max(begin + 1, round(scheduler['end'] * scale))
            if 'milestones' in scheduler:
                scheduler['milestones'] = sorted(
                    {max(1, round(m * scale)) for m in scheduler['milestones']}
                )
    cfg.default_hooks['checkpoint'] = dict(type='CheckpointHook', interval=-1, save_last=False)
    return cfg


def leaves(outputs) -> List:
    """The tensors of a nested model output."""
    import torch
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    if isinstance(outputs, dict):
        outputs = list(outputs.values())
    return [t for item in outputs
            or () for t in leaves(item)] if isinstance(outputs, (list, tuple)) else []


def cost_curve(cfg, task: Dict) -> List[Dict]:
    """Forward + backward time and peak memory of the part holding the attentions (the backbone on
    ``task['batch']`` images, else the whole model's tensor forward on one), per image side."""
    import torch

    from mmvisattn.registry import ATTENTIONS, build_from_config, models_of_scope
    model = build_from_config(cfg).to(task['device']).train()
    slots = attention_slots(cfg.model, models_of_scope(cfg.default_scope))
    part = model.backbone if measured_part(slots) == 'backbone' else None
    attention_types = tuple(ATTENTIONS.module_dict.values())
    seen: List[int] = []
    for module in model.modules():
        if isinstance(module, attention_types):
            module.register_forward_pre_hook(lambda module, args: seen.append(args[0].shape[1]))
    device = torch.device(task['device'])
    cuda = device.type == 'cuda'
    # on CPU every size's peak counts from here, the resident set's peak never reset: a larger size
    # reuses pages a smaller one freed and still holds, which a reset would not count again
    start = timing.peak_mb(cuda)
    rows = []
    for side in sorted(task['sizes']):
        if part is None:
            from .flops import tensor_forward
            forward = tensor_forward(model, cfg.default_scope, side, side)
        else:
            images = torch.randn(task['batch'], 3, side, side, device=device)
            forward = lambda: part(images)  # noqa: B023, E731
        step = lambda: sum(t.float().mean() for t in leaves(forward())).backward()  # noqa: B023, E731
        seen.clear()
        if cuda:
            timing.reset_peak(cuda)
            start = torch.cuda.memory_allocated() / 2 ** 20
        ms = timing.median_ms(step, task['repeats'], 1, cuda)
        rows.append(dict(size=side, tokens=max(seen), fwd_bwd_ms=ms,
                         peak_mb=timing.peak_mb(cuda) - start))
    return rows


def measure_cost(cfg, task: Dict) -> Dict:
    from mmvisattn.registry import build_from_config
    from mmvisattn.utils import count_parameters

    from .flops import measure_config
    curve = cost_curve(copy.deepcopy(cfg), task)
    return dict(params=count_parameters(build_from_config(copy.deepcopy(cfg))),
                gmacs=measure_config(copy.deepcopy(cfg), deploy=True)['gmacs'], curve=curve,
                time_exponent=fitted_exponent(curve, 'fwd_bwd_ms'),
                memory_exponent=fitted_exponent(curve, 'peak_mb'))


def train(cfg, task: Dict) -> Dict:
    """The task metric after the shortened recipe with ``task['seed']``, in ``task['folder']``."""
    from mmengine.runner import Runner

    from mmvisattn.engine.hooks import NonFiniteLoss
    from mmvisattn.launch.checks import check_data_files
    cfg = shortened(cfg, task['iters'])
    cfg.randomness = dict(cfg.get('randomness') or {}, seed=task['seed'])
    cfg.work_dir = task['folder']
    cfg.launcher = 'none'
    check_data_files(cfg, TRAIN_LOADERS)
    runner = Runner.from_cfg(cfg)
    start = time.perf_counter()
    try:
        runner.train()
    except NonFiniteLoss as exc:
        return dict(error=str(exc))
    metrics = {
        key[len('val/'):]: float(scalar.current())
        for key, scalar in runner.message_hub.log_scalars.items()
        if key.startswith('val/') and key not in ('val/time', 'val/data_time')
    }
    return dict(metrics=metrics, train_s=time.perf_counter() - start)


def run_child(task: Dict) -> None:
    """One part (``cost`` or ``train``) of one attention, in this process, into ``task['out']``."""
    import torch

    import mmvisattn  # noqa: F401
    from mmvisattn.launch import load_config
    if task.get('threads'):
        torch.set_num_threads(task['threads'])
    cfg = with_attention(load_config(task['config']), task['attention'])
    result = measure_cost(cfg, task) if task['part'] == 'cost' else train(cfg, task)
    Path(task['out']).write_text(json.dumps(dict(settings=task['settings'], **result), indent=1)
                                 + '\n')


def part_task(out_dir: Path, spec: str, seed: Optional[int], settings: Dict) -> Dict:
    """What the child process of one part (cost with ``seed=None``, else training) is given."""
    folder = out_dir / folder_name(spec) / ('' if seed is None else f'seed{seed}')
    cost = seed is None
    return dict(settings, settings=settings, part='cost' if cost else 'train', folder=str(folder),
                out=str(folder / ('cost.json' if cost else 'result.json')),
                log=str(folder / ('cost.log' if cost else 'run.log')))


def read_back(task: Dict) -> Optional[Dict]:
    """The part's result where an earlier run of the same settings left it; a folder of other
    settings is refused."""
    out = Path(task['out'])
    if not out.exists():
        return None
    done = json.loads(out.read_text())
    if done.get('settings') != task['settings']:
        raise SystemExit(f'error: {out} was written for other settings ({done.get("settings")}); '
                         'give another --out-dir')
    return done


def run_part(task: Dict, timeout: float) -> Dict:
    """The part run in a child process, its output in ``task['log']``; a failure is a result with an
    ``error``."""
    out, log = Path(task['out']), Path(task['log'])
    out.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **({'CUDA_VISIBLE_DEVICES': ''} if task['device'] == 'cpu' else {}))
    command = [sys.executable, '-m', 'mmvisattn.analysis.compare_attentions', task['config'],
               '--child', json.dumps(task)]
    error = run_logged(command, log, env, timeout)
    if error or not out.exists():
        return dict(error=error or f'no result in {out} (log: {log})')
    return json.loads(out.read_text())


def folder_name(spec: str) -> str:
    return ''.join(c if c.isalnum() or c in '=.,-' else '_' for c in spec)


def metric_of(metrics: Dict[str, float]) -> Tuple[Optional[str], Optional[float]]:
    key = next((key for key in METRIC_KEYS if key in metrics), None)
    return key, (metrics[key] if key else None)


def summary(spec: str, cost: Dict, runs: Dict[int, Dict]) -> Dict:
    """One attention's row of the record."""
    values = {seed: metric_of(run.get('metrics', {}))[1] for seed, run in runs.items()}
    measured = [v for v in values.values() if v is not None]
    row = dict(attention=spec,
               **{k: cost.get(k) for k in ('params', 'gmacs', 'curve', 'time_exponent',
                                                             'memory_exponent')},
               metric={str(seed): value for seed, value in values.items()},
               mean=statistics.mean(measured) if measured else None,
               spread=statistics.stdev(measured) if len(measured) > 1 else None,
               train_s=statistics.mean(run['train_s'] for run in runs.values() if 'train_s' in run)
               if any('train_s' in run for run in runs.values()) else None)
    errors = {
        name: part['error']
        for name, part in [('cost', cost)] + [(f'seed {s}', r) for s, r in runs.items()]
        if 'error' in part
    }
    return dict(row, errors=errors) if errors else row


def number(value, digits: int = 1) -> str:
    return '-' if value is None else f'{value:.{digits}f}'


def table(results: Dict) -> str:
    """The record's table (markdown)."""
    sizes = results['sizes']
    metric = results['metric'] or 'metric'
    lines = [f'`{results["config"]}`: {results["iters"]} iterations per run, seeds '
             f'{results["seeds"]}, {results["device"]}; forward + backward of the '
             f'{results["measured_part"]} on {results["batch"]} images per side (ms), peak memory '
             f'at {max(sizes)}x{max(sizes)}; MACs at the test input size, deployed.', '',
             '| attention | params (M) | GMACs | ' + ' | '.join(f'{s}² ms' for s in sizes)
             + f' | time exp. | peak MB | memory exp. | {metric} (mean ± spread) |',
             '|---' * (7 + len(sizes)) + '|']
    for row in results['attentions']:
        curve = {point['size']: point for point in row.get('curve') or ()}
        times = ' | '.join(number(curve.get(s, {}).get('fwd_bwd_ms'), 0) for s in sizes)
        largest = curve.get(max(sizes), {}).get('peak_mb')
        score = '-' if row['mean'] is None else f'{row["mean"]:.3f} ± {number(row["spread"], 3)}'
        params = None if row['params'] is None else row['params'] / 1e6
        lines.append(f'| {row["attention"]} | {number(params, 2)} | {number(row["gmacs"], 2)} | '
                     f'{times} | {number(row["time_exponent"], 2)} | {number(largest, 0)} | '
                     f'{number(row["memory_exponent"], 2)} | {score} |')
    failures = [f'- {row["attention"]}, {part}: {error}' for row in results['attentions']
                for part, error in row.get('errors', {}).items()]
    return '\n'.join(lines + ([''] + failures if failures else [])) + '\n'


def short_name(spec: str) -> str:
    return spec.replace('Attention', '')


def plot(results: Dict, out_dir: Path) -> List[Path]:
    """``cost.png`` (time and memory by tokens) and ``metric.png`` (metric by time and MACs)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    rows = [row for row in results['attentions'] if row.get('curve')]
    figure, (time_axis, memory_axis) = plt.subplots(1, 2, figsize=(12, 4.5))
    for row in rows:
        tokens = [point['tokens'] for point in row['curve']]
        time_axis.plot(tokens, [point['fwd_bwd_ms'] for point in row['curve']], marker='o',
                       label=short_name(row['attention']))
        memory_axis.plot(tokens, [max(point['peak_mb'], 1e-2) for point in row['curve']],
                         marker='o')
    log_axes(time_axis, 'forward + backward, ms', results['measured_part'])
    log_axes(memory_axis, 'peak memory, MB', results['measured_part'])
    time_axis.legend(fontsize=7)
    save_figure(figure, out_dir / 'cost.png')

    at = results['cost_at']
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for row in rows:
        if row['mean'] is None:
            continue
        step = next(point['fwd_bwd_ms'] for point in row['curve'] if point['size'] == at)
        for axis, x in zip(axes, (step, row['gmacs'])):
            axis.errorbar([x], [row['mean']], yerr=[row['spread'] or 0], marker='o', capsize=3)
            axis.annotate(short_name(row['attention']), (x, row['mean']), fontsize=7, xytext=(4, 4),
                          textcoords='offset points')
    for axis, label in zip(axes, (f'forward + backward at {at}x{at}, ms',
                                  'GMACs at the test input size')):
        axis.set(xscale='log', xlabel=label, ylabel=results['metric'] or 'metric')
        axis.grid(True, which='both', alpha=0.3)
    save_figure(figure, out_dir / 'metric.png')
    return [out_dir / 'cost.png', out_dir / 'metric.png']


def compare(args: argparse.Namespace) -> Dict:
    """Every part of every attention, run or read back; the record's results."""
    from tqdm import tqdm

    import mmvisattn  # noqa: F401
    from mmvisattn.launch import load_config
    from mmvisattn.launch.checks import check_data_files
    from mmvisattn.registry import ATTENTIONS, models_of_scope
    cfg = load_config(args.config)
    if cfg.default_scope not in ('mmdet', 'mmseg'):
        raise SystemExit(f'error: {args.config} has default_scope={cfg.default_scope!r}; the arena '
                         'takes detection '
                         "and segmentation configs ('mmdet', 'mmseg')")
    specs = args.attentions or sorted(ATTENTIONS.module_dict)
    for spec in specs:
        # an unknown type, a model without attentions: refused before any run
        with_attention(cfg, spec)
    check_data_files(cfg, TRAIN_LOADERS)
    # a schedule it cannot shorten: refused before any run
    shortened(copy.deepcopy(cfg), args.iters)
    iters = args.iters or cfg.train_cfg.max_iters
    common = dict(config=args.config, device=args.device, threads=args.threads)
    cost_settings = dict(sizes=sorted(args.sizes), batch=args.batch, repeats=args.repeats)
    tasks = {(spec, seed): part_task(args.out_dir, spec, seed, dict(
        common, attention=spec,
        **(cost_settings if seed is None else dict(iters=iters, seed=seed))))
        for spec in specs for seed in [None, *args.seeds]}
    # other settings: refused before any run
    results = {key: read_back(task) for key, task in tasks.items()}
    with tqdm(total=len(tasks), initial=sum(r is not None for r in results.values()), desc='arena',
              unit='run', file=sys.stderr) as bar:
        for spec in specs:  # one at a time: a training beside it would disturb the timing
            if results[spec, None] is None:
                bar.set_postfix_str(f'{short_name(spec)} cost')
                results[spec, None] = run_part(tasks[spec, None], args.timeout)
                bar.update()
        with ThreadPoolExecutor(args.jobs) as pool:
            runs = {pool.submit(run_part, task, args.timeout): key for key, task in tasks.items()
                    if results[key] is None}
            for run in as_completed(runs):
                results[runs[run]] = run.result()
                bar.set_postfix_str(f'{short_name(runs[run][0])} seed {runs[run][1]} done')
                bar.update()
    done = {spec: dict(cost=results[spec, None],
                       runs={seed: results[spec, seed] for seed in args.seeds})
            for spec in specs}
    metric = next(
        (
            metric_of(run.get('metrics', {}))[0]
            for spec in specs
            for run in done[spec]['runs'].values()
            if metric_of(run.get('metrics', {}))[0]
        ),
        None,
    )
    slots = attention_slots(cfg.model, models_of_scope(cfg.default_scope))
    test_side = max(test_input_size(cfg, '--sizes')[0])
    return dict(config=args.config, iters=iters, seeds=list(args.seeds), device=args.device,
                threads=args.threads, sizes=sorted(args.sizes), batch=args.batch, metric=metric,
                measured_part=measured_part(slots),
                cost_at=min(sorted(args.sizes), key=lambda side: abs(side - test_side)),
                attentions=[summary(spec, done[spec]['cost'],
                                    done[spec]['runs']) for spec in specs])


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        run_child(json.loads(args.child))
        return
    results = compare(args)
    print(table(results))
    (args.out_dir / 'arena.json').write_text(json.dumps(results, indent=1) + '\n')
    plots = plot(results, args.out_dir)
    written = [args.out_dir / 'arena.json', *plots]
    if args.record_dir:
        from .records import cpu_record, write_cpu_record
        record = cpu_record('arena', results, label=Path(args.config).stem)
        written += write_cpu_record(record, args.out_dir, args.record_dir)
        stem = record['name'][:-len('.json')]
        for path in plots:
            written.append(Path(shutil.copyfile(path, args.record_dir / f'{stem}_{path.name}')))
    print('wrote ' + ', '.join(map(str, written)))
    if any(row.get('errors') for row in results['attentions']):
        sys.exit(1)


if __name__ == '__main__':
    main()
