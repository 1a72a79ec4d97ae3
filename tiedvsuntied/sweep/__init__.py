"""A sweep before and while it runs: its jobs as Hydra expands them, each checked before the
first starts (``jobs``), where its runs stand (``progress``: no torch), and the command
``python -m tiedvsuntied.sweep plan|status|table`` (``__main__``)."""
