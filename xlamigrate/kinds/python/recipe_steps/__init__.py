"""The steps of a recipe in a Python file, each one part of what rules/modes.toml says a mode
does: its environment edits, the model's cast (and the master weights), the autocast region,
float64 under XLA_DOWNCAST_BF16. The planner runs the ones its recipe asks for."""
