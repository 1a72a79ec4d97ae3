"""The studies, one package each (``tiedvsuntied/studies/<name>/``) exposing ``STUDY``, a
``tiedvsuntied.study.declare.Study``; ``python -m tiedvsuntied.study`` finds them by name. Copy
``template`` to start one (README, "How to extend: a study")."""
