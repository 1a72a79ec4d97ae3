"""The paper's figures and tables from :mod:`tiedvsuntied.analysis` tables;
``python -m tiedvsuntied.figures SWEEP --out DIR`` (:mod:`.cli`) makes them all.

docs/figures.md lists every output and the module that makes it. Import names from the module
that defines them; REGISTRY holds every output once :mod:`.cli` (which imports every family) is
imported."""
