"""The project's lab: what only this repository's maintainers run, kept out of the installed
package.

The wheelhouse of a bare GPU machine and its install there (:mod:`.wheelhouse`, :mod:`.gpu_setup`,
mmcv's CUDA build in :mod:`.mmcv_cuda_build`), the test suite's fork server (:mod:`.tool_server`),
the golden fixtures written from the official code (:mod:`.official_fixtures`), every family's demo
through mmdeploy's own tools for the deployment page (:mod:`.deploy_benchmark`) and the records'
tables the docs render (:mod:`.records`). Each is run through its front door under ``tools/`` (or
the Makefile) from a checkout, where the editable install of ``make install`` puts the repository on
``sys.path``; the package (``mmvisattn``) never imports from here.
"""
