"""Build of the optional C kernels (everything else is in pyproject.toml).

``trellis.constrain.vocab._walkc`` runs the vocabulary walks of the grammar engine (see its source for
why); ``trellis.constrain.automata._dfac`` determinises and minimises the DFA of each terminal of a new grammar;
``trellis._qlinear`` multiplies by weights stored as exact int8 blocks (the LM head of a Q8_0
GGUF; see its source). All three are ``optional=True``: without a C compiler the install still
succeeds, the engine uses its numpy walks and Python determinising and minimising, which return the same results
(``trellis.constrain.vocab.walks.KERNEL`` and ``trellis.constrain.automata.dfa_minimise.KERNEL`` say which),
and the linears keep the BLAS kernels.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("trellis.constrain.vocab._walkc", ["trellis/constrain/vocab/_walkc.c"], optional=True,
                  extra_compile_args=["-O3"]),
        Extension("trellis.constrain.automata._dfac", ["trellis/constrain/automata/_dfac.c"], optional=True,
                  extra_compile_args=["-O3"]),
        Extension("trellis.constrain.earley._statec", ["trellis/constrain/earley/_statec.c"], optional=True,
                  extra_compile_args=["-O3"]),
        Extension("trellis.constrain.grammar._cfgc", ["trellis/constrain/grammar/_cfgc.c"], optional=True,
                  extra_compile_args=["-O3"]),
        Extension("trellis._qlinear", ["trellis/_qlinear.c"], optional=True,
                  extra_compile_args=["-O3", "-pthread"], extra_link_args=["-pthread"], libraries=["m"]),
    ],
)
