"""A sweep before and while it runs: its jobs as Hydra expands them and checks them (``jobs``),
where its runs stand (``progress``: no torch), ``python -m tiedvsuntied.sweep``."""
