"""The GPU proofs and what a bare GPU machine needs to run them.

:mod:`.ops` proves every op on CUDA (correctness against the twins over the cases of :mod:`.cases`,
races, autocast, host reads, random states, ``torch.compile`` and the benchmark rows; ``--cpu-smoke``
runs the same code on a CPU); :mod:`.models` trains, tests and resumes every family's shapes model
through the stock tools (data from :mod:`.model_data`, the probe hook of :mod:`.model_probe`, tables by
:mod:`.model_report`); :mod:`.records` keeps their JSON under ``docs/records/gpu`` and renders the tables;
:mod:`.compile_kernels` compiles every Triton kernel ahead of time for sm_80 / sm_90 and reads the
spills. :mod:`.wheelhouse` gathers the wheels the machine cannot download (mmcv built for its CUDA by
:mod:`.mmcv_cuda_build`), :mod:`.gpu_setup` installs them there.

Nothing here imports OpenMMLab at module level: ``python tools/analysis_tools/gpu_proof.py`` runs on a
machine that has only torch and Triton.
"""
