"""Stage 5 of the pipeline (the default engine): grammar IR + vocabulary walks -> token masks.

In: a ``GrammarIR`` and a ``Vocabulary``. Out: ``EarleyConstraint``, the ``Constraint`` whose
masks allow exactly the tokens that keep the output a prefix of the grammar's language.
Inside: ``earley`` (the scannerless Earley recogniser over bytes: item sets, scans through terminal
DFAs, chart steps), ``scannerless`` (the constraint: a token's bytes followed through the chart,
the vocabulary walks of ``vocab/`` shared per DFA state, the mask assembled and memoised),
``work_bound`` (the work a mask or an advance may take before ``GrammarBudgetError``),
``token_elements`` (terminals matched by a token's id: their ids per vocabulary, a token's advance).
Imports ``grammar/``, ``vocab/``, ``automata/`` and the floor modules.
Any context-free grammar; tables are built lazily, so a new grammar's first mask costs milliseconds.
"""
