"""The one trainer shared by every run: ``trainer.train(cfg)``, its loop ``trainer.run_loop``;
each module's docstring says what it holds."""
