"""Python: libcst parsing, the env-access model, detection and the recipe rewrites (the kind's
entry points are in `kind.py`)."""
