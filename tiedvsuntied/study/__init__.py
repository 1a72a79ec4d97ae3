"""A study declared once (``declare``), run by one protocol (``protocol``): ``python -m
tiedvsuntied.study`` lists the studies of ``tiedvsuntied.studies`` (``registry``), ``... NAME
PIECE [POINT]`` runs a piece, ``... NAME print PIECE [POINT]`` prints its commands. This package
names no study: each one is a package ``tiedvsuntied/studies/<name>/`` exposing ``STUDY``."""
