# The safeguard hooks every mmvisattn config runs, whichever runtime it inherits: det_runtime.py and
# seg_runtime.py inherit this file, and configs built on a stock mmdet/mmseg config name it as a
# second base, so stock `tools/train.py`, `mim train` and ours run the same hooks. They are custom
# hooks because mmseg keeps `default_hooks` in its schedules and mmengine refuses a key two bases
# both
# define:
# - RandomStateHook: every random generator in the checkpoints, so a resumed run continues exactly;
# - FiniteLossHook: a stop at the first non-finite loss, before a checkpoint of it is written;
# - RankMeanLossHook: the logged losses averaged over the ranks, not rank 0's alone;
# - DroppedAnnotationsHook: a report of the annotations the pipeline dropped;
# - PreemptionHook: on SIGUSR1 or SIGTERM (Slurm's warning, preemption), a checkpoint of the current
#   iteration and a clean stop (`requeue=True`: a Slurm batch job requeues itself, see
#   tools/train.py).
# A config that adds custom hooks keeps these with `custom_hooks = [*_base_.custom_hooks,
# dict(...)]`; one that leaves a safeguard out lists the others. The hook types need `import
# mmvisattn` (`custom_imports`, which the runtimes set).
custom_hooks = [
    dict(type='RandomStateHook'), dict(type='FiniteLossHook', interval=1),
    dict(type='RankMeanLossHook'), dict(type='DroppedAnnotationsHook'), dict(type='PreemptionHook'),
]
