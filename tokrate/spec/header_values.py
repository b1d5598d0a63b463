"""What may go into an HTTP header: the one rule the config's headers and the API keys
read from the environment are checked by when the run's settings load (every client
then sends them as they are: httpx and the openai SDK encode header values as ASCII,
and a line break would end the header and start another)."""

from __future__ import annotations

__all__ = ["header_value_problem"]


def header_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be an HTTP header value, naming the position (1 is the
    first character) and never the character (the value may be a secret); None when
    it can be one: printable ASCII and tabs."""
    for i, ch in enumerate(value, start=1):
        code = ord(ch)
        if ch in "\r\n":
            return f"character {i} is a line break (CR/LF)"
        if (code < 0x20 and ch != "\t") or code == 0x7F:
            return f"character {i} is a control character"
        if code > 0x7F:
            return f"character {i} is not ASCII"
    return None
