"""docs/deploy/install.md as a list of commands: every ``sh`` block's, in order, each with its
section, the machine its block's first line names (the server if none) and its block's number."""
from __future__ import annotations

import re
from dataclasses import dataclass

MACHINE_LINE = re.compile(r"#\s*On the (offline machine|journalist workstation|new server)\b", re.I)
# Words the admin replaces before running a line; install-check fills in its own values.
PLACEHOLDER = re.compile(r"<[A-Z][A-Z-]*>|YYYY-MM-DD")


@dataclass(frozen=True)
class Command:
    section: str
    text: str
    machine: str = "server"
    block: int = 0

    @property
    def first_line(self) -> str:
        return self.text.splitlines()[0]


def guide_commands(text: str) -> list[Command]:
    """The commands of every ``sh`` block (continuation lines joined, here-documents kept whole)."""
    commands: list[Command] = []
    section, block, indent, number = "", None, 0, 0
    for line in text.splitlines():
        stripped = line.lstrip()
        if block is None:
            if line.startswith("## "):
                section = line[3:].strip()
            elif stripped.startswith("```sh"):
                block, indent = [], len(line) - len(stripped)
            continue
        if stripped.startswith("```"):
            number += 1
            named = MACHINE_LINE.match(block[0].strip()) if block else None
            machine = named.group(1).lower() if named else "server"
            commands += [Command(section, c, machine, number) for c in _split(block)]
            block = None
        else:
            block.append(line[indent:])
    return commands


def _split(lines: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\") and i < len(lines):
            line = line[:-1].rstrip() + " " + lines[i].strip()
            i += 1
        heredoc = re.search(r"<<'?(\w+)'?", line)
        if heredoc:
            body = []
            while i < len(lines) and lines[i].strip() != heredoc.group(1):
                body.append(lines[i])
                i += 1
            i += 1
            line = "\n".join([line, *body, heredoc.group(1)])
        out.append(line)
    return out
