"""The package's exceptions."""


class MergeError(RuntimeError):
    """A merge failed: the message says which stage and why."""


class ConfigError(ValueError):
    """A configuration has errors: ``.diagnostics`` lists every one of
    them (errors and warnings) as "label:line:col: path: message" lines,
    and the message holds the errors."""

    def __init__(self, message, diagnostics):
        super().__init__(message)
        self.diagnostics = diagnostics

