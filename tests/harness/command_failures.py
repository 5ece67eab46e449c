"""Tables of batch-command failures as the batch systems print them, for the parser modules' classifier tests."""

from __future__ import annotations


def failure_rows(table: str) -> list[tuple[str, int | None, str, str]]:
    """``command | exit code (-: timed out) | the error it is | stderr`` lines → test parameters.

    A long stderr continues on the next line, indented: its whitespace is read as one space.
    """
    rows = []
    for line in table.splitlines():
        command, code, error, text = (field.strip() for field in line.split("|", 3))
        rows.append((command, None if code == "-" else int(code), error, " ".join(text.split())))
    return rows
