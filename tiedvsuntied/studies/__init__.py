"""The studies, one package each beside the core (as Lingua's ``apps/``), each exposing ``STUDY``,
a :class:`tiedvsuntied.study.declare.Study`, and its reading code (its analysis, figures and
tables) above :mod:`tiedvsuntied.analysis` and :mod:`tiedvsuntied.figures`, which never import
it by name: ``python -m tiedvsuntied.study`` finds the declarations and ``python -m
tiedvsuntied.figures`` the outputs (:func:`tiedvsuntied.figures.paper.discover`), by name. Copy
``template`` to start one (README, "How to extend: a study")."""
