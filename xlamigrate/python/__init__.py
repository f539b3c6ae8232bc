"""Python support: libcst parsing, the env-access model, detection."""
