"""`xlamigrate verify`: run a script and its rewrites side by side on torch-xla's CPU device.

Imported only by the `verify` command: the scan and rewrite commands never load it. Nothing here
imports torch; `recorder` runs inside the training processes.
"""
