"""The cross-file model of a project: which process every enabling write of a legacy flag
reaches (a launched in-tree script, or something xlamigrate cannot follow), under which
configuration, and what carries that configuration to the script once the flag is gone.

`scan` and `rewrite` both build it (`decide.decide`) from the launchers' analyses; each file's
plan is then made from the decisions that concern it (`model.Project`).
"""
