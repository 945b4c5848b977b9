"""Build of the optional C kernel (everything else is in pyproject.toml).

``trellis.constrain._walkc`` runs the vocabulary walks of the grammar engine (see its source for
why); ``optional=True``: without a C compiler the install still succeeds and the engine uses its
numpy walks, which return the same results (``trellis.constrain.rest_walk.KERNEL`` says which).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("trellis.constrain._walkc", ["trellis/constrain/_walkc.c"], optional=True,
                  extra_compile_args=["-O3"]),
    ],
)
