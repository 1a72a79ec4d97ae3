"""The paper's figures and tables from :mod:`tiedvsuntied.analysis` tables;
``python -m tiedvsuntied.figures SWEEP --out DIR`` (:mod:`.cli`) makes them all.

- :mod:`.style`: colours, rc, the output REGISTRY and the ``@figure`` that fills it, panel helpers
- :mod:`.loss` (figures 1, 2), :mod:`.init` (3), :mod:`.geometry` (4), :mod:`.gradients` (5),
  :mod:`.paired` (6, 10, 11), :mod:`.finetune` (7), :mod:`.similarity` (8, 9), :mod:`.books`
- :mod:`.tables`: parameters per size, the paired comparisons

docs/figures.md lists every output. Import names from the module that defines them; REGISTRY
holds every output once :mod:`.cli` (which imports every family) is imported."""
