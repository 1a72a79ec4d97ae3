"""The paper's figures and tables from :mod:`tiedvsuntied.analysis` tables (docs/figures.md);
``python -m tiedvsuntied.figures`` (:mod:`.cli`) makes them all. REGISTRY holds every output once
:mod:`.cli`, which imports every family, is imported."""
