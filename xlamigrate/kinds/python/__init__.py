"""Python: the env-access model, detection and the recipe rewrites, analysed and planned on the
standard library's `ast`, the edits written by libcst (the kind's entry points are in
`kind.py`)."""
