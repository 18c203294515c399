"""The engine's error codes. Not rules: an engine error is always reported, whatever the rule selection. Apart from
the plan vocabulary (`ampfix.core.plan`), whose classes a run that replays kept findings does not load."""

INTERNAL_ERROR_CODE = "AMP900"
SYNTAX_ERROR_CODE = "AMP901"
