"""Where a session's notes go (:class:`Notes`): the command line prints them
(``sim.app.cli``), the API drops them (:class:`Quiet`)."""

from __future__ import annotations

from typing import Any, Protocol

from arch.executable import Executable


class Notes(Protocol):
    """Where a session's notes go: the command line prints them, the API drops them."""

    def say(self, text: str) -> None:
        """A line of the run's story (stdout)."""

    def warn(self, text: str) -> None:
        """A line about something that went wrong or was not done (stderr)."""

    def stream(self, text: str) -> None:
        """Text as it comes (generated characters; stdout), no newline added."""

    def progress(self, exe: Executable) -> Any:
        """The simulator's progress callback of a run of ``exe`` (None: no progress)."""


class Quiet:
    """Notes nobody reads (the API)."""

    def say(self, text: str) -> None:
        pass

    def warn(self, text: str) -> None:
        pass

    def stream(self, text: str) -> None:
        pass

    def progress(self, exe: Executable) -> Any:
        return None
