"""Experiment presets (`--preset=NAME`) and the files they name; installed with the package
so that presets work after a plain `pip install .` too."""
