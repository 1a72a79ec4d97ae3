"""The second edition (experiments/tie_x_init_books): tying x init std on held-out books. Its
reading side: :mod:`.analysis` (arms, the lr rule, the contrast tables, the books' variance) and
:mod:`.figures` (its figures and tables)."""
