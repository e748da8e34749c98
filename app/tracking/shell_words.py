"""Shell words of a line, each with where its characters came from in the line.

`redact` reads text the way a shell (and Hydra, and YAML's flow scalars) reads it: a word runs
to the first unquoted blank, `'...'` and `"..."` group blanks into it, a backslash escapes the
next character (outside single quotes). Unlike `shlex.split`, every character of a word's value
keeps its index in the line, so a secret found in the value is masked in the line in place,
quotes and the rest of the line kept. An unclosed quote runs to the end of the line (shlex
raises): a log line's apostrophe must not stop the reading.
"""

from __future__ import annotations

from dataclasses import dataclass, field

QUOTES = "'\""


@dataclass
class Word:
    """A word's unquoted `value`; `pos[i]` is the line index of `value[i]`, `seg[i]` the
    quoted or bare segment it came from (0, 1, ... in order)."""

    value: str = ""
    pos: list[int] = field(default_factory=list)
    seg: list[int] = field(default_factory=list)

    def add(self, char: str, index: int, segment: int) -> None:
        self.value += char
        self.pos.append(index)
        self.seg.append(segment)


def words(line: str) -> list[Word]:
    """The line's words in order (empty quoted words `''` are dropped: nothing to mask)."""
    out: list[Word] = []
    i, n = 0, len(line)
    while i < n:
        if line[i].isspace():
            i += 1
            continue
        word, segment, quote = Word(), 0, ""
        while i < n and (quote or not line[i].isspace()):
            char = line[i]
            if quote and char == quote:
                quote, segment = "", segment + 1
            elif not quote and char in QUOTES:
                quote, segment = char, segment + 1
            elif char == "\\" and quote != "'" and i + 1 < n:
                i += 1
                word.add(line[i], i, segment)
            else:
                word.add(char, i, segment)
            i += 1
        if word.value:
            out.append(word)
    return out
