"""Errors the library raises; the CLI turns each into one line on stderr and its `exit_code`.

Messages name the file or option at fault and say how to fix it.
"""


class NmtError(Exception):
    """Base class of every error meant for the user (not a bug)."""

    exit_code = 1  # the process's exit status when this error ends a command


class InputError(NmtError):
    """A user-supplied file or value is missing, unreadable or malformed."""


class ConfigError(NmtError):
    """Options that contradict each other or an existing run."""


class CheckpointError(NmtError):
    """A checkpoint is missing, corrupt, foreign or incompatible."""


class DataError(NmtError):
    """A binarized dataset is missing, incomplete or corrupt."""


class DownloadError(NmtError):
    """A download failed: HTTP error, checksum mismatch, unsafe archive."""


class TrainingInterrupted(NmtError):
    """Training stopped by Ctrl-C (SIGINT) or SIGTERM; a checkpoint was written, rerun to resume.

    `exit_code` follows the shell's convention: 128 + the signal number (130 for Ctrl-C, 143 for SIGTERM).
    """

    def __init__(self, message: str, signum: int = 2):  # 2: SIGINT
        super().__init__(message)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum)


class TrainingDiverged(NmtError):
    """The loss stayed NaN/inf for --max-bad-updates updates in a row."""
