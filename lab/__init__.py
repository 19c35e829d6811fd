"""The project's lab: what only this repository's maintainers run, kept out of the installed
package.

A bare GPU machine's wheelhouse and install (:mod:`.wheelhouse`, :mod:`.gpu_setup`,
:mod:`.mmcv_cuda_build`), the test suite's fork server (:mod:`.tool_server`), the official code's
golden fixtures (:mod:`.official_fixtures`), the demos through mmdeploy (:mod:`.deploy_benchmark`)
and the records' tables (:mod:`.records`). Each runs through its front door under ``tools/`` (or the
Makefile) from a checkout; the package never imports from here.
"""
