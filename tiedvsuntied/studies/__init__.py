"""The studies, one package each beside the core (as Lingua's ``apps/``): a study's reading code
(its analysis, figures and tables) above :mod:`tiedvsuntied.analysis` and
:mod:`tiedvsuntied.figures`, which never import it by name; ``python -m tiedvsuntied.figures``
finds each study's outputs by :func:`tiedvsuntied.figures.paper.discover`."""
