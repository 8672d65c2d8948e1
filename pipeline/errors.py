"""The project's own error type for problems a user can fix (caught by the stage CLIs)."""


class StageError(RuntimeError):
    """A stage cannot do its work as configured; the message is one line naming the
    setting, file or variant at fault. The stage CLIs print it as ``error: ...``."""
