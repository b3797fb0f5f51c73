"""The one part of the build that setup.cfg cannot declare: the native event scanner.

``optional=True``: where no C compiler is at hand, the install goes on without it and ddpprof
decodes every trace with its Python decoder (the same results, slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("ddpprof.trace._scan", ["ddpprof/trace/_scan.c"],
                             depends=["ddpprof/trace/_scan_intern.h"],
                             extra_compile_args=["-O3"], optional=True)])
