"""Errors of the batch hand-off, one per answer a trainer may want to handle on its own."""

from __future__ import annotations


class BatchRequestError(Exception):
    """agl refused a batch request (or could not be reached: ``status`` is None).

    ``status`` is the HTTP status (404, 409, 400 ...), ``message`` what agl said about it.
    """

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(f"{status}: {message}" if status is not None else message)
        self.status = status
        self.message = message


class BatchNotFoundError(BatchRequestError):
    """The batch id is unknown (HTTP 404, or no such batch file in the directory)."""


class BatchAlreadyDoneError(BatchRequestError):
    """The batch was acknowledged already (HTTP 409, or its done file exists)."""


class FeedbackError(Exception):
    """agl refused a feedback (404: an unknown target, 400: a bad field) or could not be reached (``status`` None)."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(f"{status}: {message}" if status is not None else message)
        self.status = status
        self.message = message


def error_for_status(status: int | None, message: str) -> BatchRequestError:
    """The most specific error class for an HTTP status."""
    if status == 404:
        return BatchNotFoundError(status, message)
    if status == 409:
        return BatchAlreadyDoneError(status, message)
    return BatchRequestError(status, message)
