"""Whole models on a GPU through the stock tools (``make gpu-proof-models``): every family's shipped
config trained, tested and resumed by the project's train and test tools (the real Runner, hooks and
optimizer wrapper), beside the stock model it replaces.

    python tools/analysis_tools/gpu_proof_models.py [--out-dir DIR] [--families F ...] [--pairs
        KEY ...] [--stages project stock amp rest] [--budget SECONDS] [--largest] [--smoke]
        [--fresh]

Per model, one process per run, on synthetic data at the config's size and layout
(:mod:`.model_data`) with the probe hook (:mod:`.model_probe`):

1. ``tools/train.py`` for ``--iters`` in float32: finite losses, step time (median of the last 10),
peak memory, the synchronisation audit and every op's implementation;
2. ``tools/test.py`` on the validation images: images per second;
3. ``tools/train.py --resume`` for ``--resume-iters``: it must start at the checkpoint's iteration;
4. (stage ``amp``) ``tools/train.py --amp``.

Castling's test is of its deploy form (``CastlingScheduleHook`` switches at 3/4 of training). Stages
``project``, ``stock``, ``amp``, ``rest`` run in order, skipped once ``--budget`` is spent;
``--largest`` searches the largest input per model (:mod:`lab.bench.largest_input`). Results
accumulate in ``models.json`` (``--fresh`` restarts), tabled in ``models.md``, recorded in
``record_models.json``.

``--smoke`` runs it on a CPU at tiny sizes inside ``make test`` (every family through train, test
and resume, a largest-input search under a simulated cap, and an out-of-memory row). Without CUDA
and ``--smoke`` it fails in one line.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from lab.bench.largest_input import out_of_memory
from lab.bench.model_pairs import FAMILIES, PAIRS, ModelPair
from lab.bench.models import write_json
from lab.bench.processes import run_python as run_child
from lab.proof.model_data import (
    LAYOUT_SIZES,
    dataset_layouts,
    derive_config,
    read_config,
    write_data,
)
from lab.proof.model_report import markdown, record_rows
from lab.records import record
from mmvisattn.analysis.processes import failure_line

STAGES = ('project', 'stock', 'amp', 'rest')
# the tools' logic, run as modules (``tools/train.py`` and ``tools/test.py`` are their front doors)
TRAIN, TEST = 'mmvisattn.launch.train', 'mmvisattn.launch.test'
# the pair of each family proven first
FIRST_PAIRS = ('segformer-b0-rwgka', 'retinanet-vil-tiny', 'smca-ripple',
               'mask2former-castling-vit-b', 'picodet-s-castling', 'upernet-pervit-t')
# the shapes configs (128 px) of the CPU smoke, one per family
SMOKE_CONFIGS = {
    'segformer_rwgka':
        'configs/segformer_rwgka/segformer_mit-b0-rwgka_1xb8-600i_shapes-cityscapes-128.py',
    'vil': 'configs/vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py',
    'smca': 'configs/smca/smca_r18_1xb8-600i_shapes-coco-128.py', 'castling':
        'configs/castling/segformer-head_castling-levit-s_1xb8-600i_shapes-cityscapes-128.py',
    'picodet': 'configs/picodet/picodet-s_castling_1xb16-600i_shapes-coco-128.py',
    'pervit': 'configs/pervit/upernet_pervit-t_1xb8-600i_shapes-cityscapes-128.py',
}
# what a smoke config sets otherwise (the SMCA demo's encoder is softmax; its op is ripple)
SMOKE_OPTIONS = {
    'smca': {'model.encoder.layer_cfg.attn_cfg': dict(type='RippleAttention', attn_drop=0.0)}
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out-dir', type=Path, default=Path('work_dirs/gpu_proof_models'))
    parser.add_argument('--families', nargs='+', metavar='FAMILY',
                        help=f'default: all of {", ".join(FAMILIES)}')
    parser.add_argument('--pairs', nargs='+', metavar='KEY',
                        help='pair keys (default: every pair of the families)')
    parser.add_argument('--stages', nargs='+', default=list(STAGES), choices=STAGES)
    parser.add_argument('--budget', type=float, default=540.0,
                        help='seconds after which nothing new starts')
    parser.add_argument('--iters', type=int, help='training iterations (default 20; --smoke: 6)')
    parser.add_argument('--resume-iters', type=int,
                        help='iterations after the resume (default 5; --smoke: 2)')
    parser.add_argument('--images', type=int,
                        help='synthetic images per split (default 8; --smoke: 2)')
    parser.add_argument('--parallel', type=int,
                        help='runs at a time (default 1, as timings need; --smoke: 2); '
                        'a later run with another value measures again')
    parser.add_argument('--largest', action='store_true',
                        help='the largest-input search instead of the runs')
    parser.add_argument('--smoke', action='store_true', help='the same code on CPU at tiny sizes')
    parser.add_argument('--fresh', action='store_true',
                        help="ignore --out-dir's earlier models.json")
    args = parser.parse_args(argv)
    for name, gpu, smoke in (('iters', 20, 6), ('resume_iters', 5, 2), ('images', 8, 2),
                             ('parallel', 1, 2)):
        if getattr(args, name) is None:
            setattr(args, name, smoke if args.smoke else gpu)
    if args.iters < 3 + 2:  # the probe's steps (model_probe.py)
        parser.error(f'--iters must be at least 5, got {args.iters}')
    for flag, given, known in (('--families', args.families, FAMILIES),
                               ('--pairs', args.pairs, PAIRS)):
        unknown = sorted(set(given or ()) - set(known))
        if unknown:
            parser.error(f'{flag} {unknown}: expected names among {sorted(known)}')
    return args


# ---------------------------------------------------------------- what to run

def selected_pairs(args: argparse.Namespace) -> List[ModelPair]:
    pairs = [PAIRS[key] for key in args.pairs] if args.pairs else list(PAIRS.values())
    return [pair for pair in pairs if not args.families or pair.family in args.families]


def plan(args: argparse.Namespace) -> List[Dict]:
    """The runs in stage order: ``dict(stage, model, config, stock, pair, amp)``."""
    pairs = selected_pairs(args)
    first = [p for p in pairs if p.key in FIRST_PAIRS] or pairs[:1]
    rest = [p for p in pairs if p not in first]
    jobs = []

    def add(stage: str, pair: ModelPair, stock: bool, amp: bool = False) -> None:
        if stock and pair.deploy:
            return  # the deploy pair's stock model is its training pair's
        config = pair.stock if stock else pair.project
        jobs.append(dict(stage=stage, pair=pair.key, family=pair.family, stock=stock, amp=amp,
                         config=config, deploy=pair.deploy and not stock,
                         model=f'{pair.stock_label} ({pair.key})' if stock else pair.key))
    for pair in first:
        add('project', pair, False)
    for pair in first:
        add('stock', pair, True)
    for pair in first:
        add('amp', pair, False, True)
        add('amp', pair, True, True)
    for pair in rest:
        for stock, amp in ((False, False), (True, False), (False, True), (True, True)):
            add('rest', pair, stock, amp)
    return [job for job in jobs if job['stage'] in args.stages]


def smoke_plan() -> List[Dict]:
    jobs = [dict(stage='project', pair=family, family=family, stock=False, amp=False, config=config,
                 deploy=False, model=f'{family} (shapes)', options=SMOKE_OPTIONS.get(family, {}))
            for family, config in SMOKE_CONFIGS.items()]
    jobs.append(dict(jobs[0], model=f'{jobs[0]["model"]} under a 1 MB cap', memory_cap_mb=1.0,
                     stage='oom'))
    jobs.append(dict(jobs[0], stage='largest', memory_cap_mb=400.0))  # the search, up to its cap
    return jobs


def job_key(job: Dict) -> str:
    largest = ' largest' if job['stage'] == 'largest' else ''
    return f'{job["model"]}{" amp" if job["amp"] else ""}{largest}'


# ---------------------------------------------------------------- running the stock tools

def tool_env(threads: Optional[int] = None) -> Dict[str, str]:
    """The tools' environment: this one, unbuffered; ``threads`` for torch's CPU operators (runs
    side by side share the cores)."""
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    if threads is not None:
        env['OMP_NUM_THREADS'] = str(threads)
    return env


def run_python(command: Sequence[str], timeout: float, threads: Optional[int],
               log: Optional[Path] = None) -> subprocess.CompletedProcess:
    """``python command`` in a process of its own (:func:`lab.bench.processes.run_python`); its
    output in ``log``, or returned as text."""
    return run_child(command, timeout, tool_env(threads), output=log)


def run_tool(command: Sequence[str], log: Path, timeout: float, threads: Optional[int] = None,
             capped_cpu: bool = False) -> Tuple[Optional[str], float]:
    """Runs a tool with its output in ``log``; returns (its failure in one line or None, seconds);
    ``capped_cpu``: the tool caps its address space (:func:`.largest_input.out_of_memory`)."""
    start = time.perf_counter()
    try:
        result = run_python(command, max(timeout, 1), threads, log)
    except subprocess.TimeoutExpired:
        return f'out of time after {timeout:.0f} s (--budget)', time.perf_counter() - start
    seconds = time.perf_counter() - start
    if result.returncode == 0:
        return None, seconds
    text = log.read_text()
    if out_of_memory(text, capped_cpu):
        return 'out of memory', seconds
    return failure_line(text), seconds


def read_probe(work: Path, mode: str, keep_as: Optional[str] = None) -> Dict:
    """What the probe hook wrote of a run ({} if nothing), moved to ``probe_<keep_as>.json`` where
    given, so the next run cannot be read as this one."""
    path = work / f'probe_{mode}.json'
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if keep_as:
        path.replace(work / f'probe_{keep_as}.json')
    return data


def checks(train: Dict, resume: Dict, job: Dict, args: argparse.Namespace) -> Dict[str, object]:
    """The run's checks, each True/False (``None``: not reached)."""
    dispatch = train.get('dispatch')
    backbone = train.get('backbone_syncs')
    return dict(
        finite_losses=train.get('finite_losses'),
        dispatch_as_named=None if dispatch is None else all(row['ok'] for row in dispatch),
        backbone_sync_free=None if backbone is None else backbone['total'] == 0,
        resumes_at_checkpoint=resume.get('first_iter') == args.iters if resume.get('done')
        else None)


def threads_per_run(args: argparse.Namespace) -> Optional[int]:
    """The cores a run's CPU operators take when ``--parallel`` runs share them (None: default)."""
    return max(1, (os.cpu_count() or 1) // args.parallel) if args.parallel > 1 else None


def work_dir(job: Dict, args: argparse.Namespace) -> Path:
    return args.out_dir / 'runs' / re.sub(r'[^A-Za-z0-9.-]+', '_', job_key(job)).strip('_')


def run_model(job: Dict, args: argparse.Namespace, deadline: float) -> Dict:
    """Train (float32 or --amp), test and, for float32, resume one model (its config derived into
    its work dir beforehand); its row."""
    work = work_dir(job, args)
    config = str(work / 'config.py')
    threads = threads_per_run(args)
    capped_cpu = job.get('memory_cap_mb') is not None and args.device == 'CPU'

    def tool(name: str, *command: str) -> Tuple[Optional[str], float]:
        return run_tool(command, work / f'{name}.log', deadline - time.perf_counter(), threads,
                        capped_cpu)
    row = dict(model=job['model'], pair=job['pair'], family=job['family'], stock=job['stock'],
               amp=job['amp'], config=job['config'], stage=job['stage'])
    error, row['train_s'] = tool('train', '-m', TRAIN, config, '--work-dir', str(work),
                                 *(['--amp'] if job['amp'] else []))
    train = read_probe(work, 'train', keep_as='first')
    row.update(first_iter=train.get('first_iter'), last_iter=train.get('last_iter'),
               step_ms=train.get('median_step_ms'), peak_mb=train.get('peak_mb'),
               losses=train.get('losses'), dispatch=train.get('dispatch'),
               host_reads=train.get('host_reads'), backbone_syncs=train.get('backbone_syncs'),
               profiled_syncs=train.get('profiled_syncs'))
    resume: Dict = {}
    if error is None and not job['amp']:
        error, row['test_s'] = tool('test', '-m', TEST, config,
                                    str(work / f'iter_{args.iters}.pth'), '--work-dir', str(work))
        test = read_probe(work, 'test')
        row.update(test_images_s=test.get('images_per_s'), test_images=test.get('images'),
                   metrics=test.get('metrics'))
    if error is None and not job['amp']:
        error, row['resume_s'] = tool('resume', '-m', TRAIN, config, '--work-dir', str(work),
                                      '--resume', '--cfg-options',
                                      f'train_cfg.max_iters={args.iters + args.resume_iters}')
        # the resumed run's record replaces the first's (kept in the row)
        resume = read_probe(work, 'train')
        row.update(resume_first_iter=resume.get('first_iter'),
                   resume_last_iter=resume.get('last_iter'))
    row['checks'] = checks(train, resume, job, args)
    row['out_of_memory'] = error == 'out of memory'
    row['error'] = error
    row['ok'] = error is None and all(value is not False for value in row['checks'].values())
    return row


# ---------------------------------------------------------------- the largest input

def run_largest(job: Dict, args: argparse.Namespace, deadline: float) -> Dict:
    pair = PAIRS.get(job['pair'])
    stride = pair.stride if pair else 32
    payload = dict(config=job['config'], deploy=job['deploy'], stride=stride,
                   memory_cap_mb=job.get('memory_cap_mb'),
                   start=64 if args.smoke else 256, ceiling=512 if args.smoke else 8192)
    row = dict(model=job['model'], pair=job['pair'], family=job['family'], stock=job['stock'],
               config=job['config'], stage='largest')
    try:
        result = run_python(['-m', 'lab.bench.largest_input', json.dumps(payload)],
                            max(deadline - time.perf_counter(), 1), threads_per_run(args))
    except subprocess.TimeoutExpired:
        return dict(row, error='out of time (--budget)', ok=False)
    if result.returncode != 0:
        return dict(row, error=failure_line(result.stderr), ok=False)
    return dict(row, **json.loads(result.stdout.strip().splitlines()[-1]), error=None, ok=True)


# ---------------------------------------------------------------- the run

def preflight(smoke: bool) -> str:
    """The GPU's name, or one line naming what is missing."""
    import torch
    if not smoke and not torch.cuda.is_available():
        raise SystemExit('error: no CUDA device: make gpu-proof-models runs on a GPU machine '
                         '(make gpu-proof-models-smoke runs its code on this CPU)')
    try:
        import mmcv.ops  # noqa: F401  (the compiled ops the heads call)
        import mmdet  # noqa: F401
        import mmseg  # noqa: F401
    except ImportError as error:
        raise SystemExit(
            f'error: OpenMMLab does not import ({error}); run make gpu-setup first'
        ) from None
    return torch.cuda.get_device_name() if torch.cuda.is_available() else 'CPU'


def layout_roots(jobs: Sequence[Dict], args: argparse.Namespace) -> Dict[str, Path]:
    """Synthetic data for every layout the jobs' configs read."""
    layouts = sorted(
        {layout for job in jobs for layout in dataset_layouts(read_config(job['config']))}
    )
    return {layout: write_data(args.out_dir, layout,
                               (128, 128) if args.smoke else LAYOUT_SIZES[layout],
                               args.images) for layout in layouts}


def settings(args: argparse.Namespace) -> Dict:
    return dict(iters=args.iters, resume_iters=args.resume_iters, images=args.images,
                smoke=args.smoke, parallel=args.parallel)


def load_results(args: argparse.Namespace) -> Dict[str, Dict]:
    """The rows of an earlier same-settings run needing no rerun (done, or out of memory)."""
    path = args.out_dir / 'models.json'
    if args.fresh or not path.exists():
        return {}
    earlier = json.loads(path.read_text())
    return (
        {
            key: row
            for key, row in earlier['rows'].items()
            if row.get('ok') or row.get('out_of_memory')
        }
        if earlier.get('settings') == settings(args)
        else {}
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    gpu = args.device = preflight(args.smoke)
    start = time.perf_counter()
    deadline = start + args.budget
    args.out_dir = args.out_dir.resolve()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    jobs = smoke_plan() if args.smoke else plan(args)
    if args.largest:
        jobs = [dict(job, stage='largest') for job in jobs if not job['amp']
                and job['stage'] != 'oom']
    # the Castling run's test is of its deploy form already: CastlingScheduleHook switches at 3/4
    else:
        jobs = [job for job in jobs if not job['deploy']]
    rows = load_results(args)
    pending = [(job_key(job), job) for job in jobs if job_key(job) not in rows]
    trained = [job for _, job in pending if job['stage'] != 'largest']
    roots = layout_roots(trained, args) if trained else {}
    skipped = []

    def run(key: str, job: Dict) -> None:
        if time.perf_counter() > deadline:
            with lock:
                skipped.append(key)
                rows[key] = dict(model=job['model'], pair=job['pair'], stage=job['stage'],
                                 amp=job['amp'], stock=job['stock'],
                                 skipped=f'out of time (--budget {args.budget:g} s)', ok=False)
            return
        print(f'==> {key} ({job["config"]})', flush=True)
        if job['stage'] != 'largest':
            # one at a time: loading configs is not thread-safe (mmengine's package lookups)
            with lock:
                derive_config(job, args.iters, args.smoke, roots, work_dir(job, args))
        row = run_largest(job, args,
                          deadline) if job['stage'] == 'largest' else run_model(job, args, deadline)
        print(f'    {key}: {"ok" if row["ok"] else "FAILED"}: ' + ', '.join(
            f'{name} {row[name]:.1f}' if isinstance(row.get(name), float) else f'{name} {row[name]}'
            for name in ('step_ms', 'peak_mb', 'test_images_s', 'largest_input', 'error')
            if row.get(name) is not None),
            flush=True)
        with lock:
            rows[key] = row
            write_json(args.out_dir / 'models.json',
                       dict(gpu=gpu, settings=settings(args), rows=rows))
    lock = threading.Lock()
    with ThreadPoolExecutor(args.parallel) as pool:  # each run is its own process
        for future in [pool.submit(run, key, job) for key, job in pending]:
            future.result()
    # the plan's order first
    rows = {key: rows[key] for key in [*map(job_key, jobs), *rows] if key in rows}
    write_json(args.out_dir / 'models.json', dict(gpu=gpu, settings=settings(args), rows=rows))
    (args.out_dir / 'models.md').write_text(markdown(gpu, rows, skipped))
    write_json(args.out_dir / 'record_models.json',
               record('models', gpu, record_rows(rows), openmmlab=True))
    failed = [key for key, row in rows.items() if not row['ok'] and not row.get('skipped')
              and not (row.get('out_of_memory') and (row['stage'] in ('oom',) or not args.smoke))]
    print(f'{len(rows)} runs in {time.perf_counter() - start:.0f} s; {len(failed)} failed'
          + (f' ({"; ".join(failed)})' if failed else '')
          + (f'; {len(skipped)} skipped' if skipped else '')
          + f'; wrote {args.out_dir}/models.md')
    capped = [row for row in rows.values() if row['stage'] == 'oom' and not row.get('skipped')]
    if capped and not all(row['out_of_memory'] for row in capped):
        print('error: the run under the 1 MB cap did not come out as an out-of-memory row',
              file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
