"""The proofs of a GPU: what a user runs on their own GPU machine, and what the project's records
hold.

:mod:`.ops` proves every op on CUDA (correctness against the twins over the cases of :mod:`.cases`,
races, autocast, host reads, random states, ``torch.compile`` and the benchmark rows;
``--cpu-smoke`` runs the same code on a CPU); :mod:`.models` trains, tests and resumes every
family's shapes model through the stock tools (data from :mod:`.model_data`, the probe hook
of :mod:`.model_probe`, tables by :mod:`.model_report`), each writing its record
(:mod:`lab.records`, which also judges the goals against SDPA); :mod:`.compile_kernels` compiles
every Triton kernel ahead of time for sm_80 / sm_90 and reads the spills. The stack a bare GPU
machine of this project needs is carried by the repository's lab (``lab/wheelhouse.py``,
``lab/gpu_setup.py``).

Nothing here imports OpenMMLab at module level: ``python tools/analysis_tools/gpu_proof.py`` runs on
a machine that has only torch and Triton.
"""
