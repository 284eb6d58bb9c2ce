"""Which arguments of an argv command a program reads as code: a shell's script, another interpreter's program."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

SHELLS = frozenset({"sh", "bash", "rbash", "dash", "zsh", "ksh", "mksh", "pdksh", "oksh", "lksh", "ash", "hush",
                    "yash", "posh", "fish", "csh", "tcsh"})
"""Programs whose `-c` argument is shell text (by the name of the program file, version suffix aside)."""
_SHELL_ARG_OPTIONS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file", "--emulate", "-C", "--init-command",
                                "-R"})
"""A shell's options that take the next argument as their value (set -o's name, an rc file, ...)."""
_CODE_LETTERS = {"python": "c", "pypy": "c", "perl": "eE", "ruby": "e", "node": "ep", "nodejs": "ep",
                 "php": "rBRE", "lua": "e", "luajit": "e", "Rscript": "e", "osascript": "e", "tclsh": "",
                 "jshell": ""}
"""Interpreters, and the letters of their options whose value (the next argument, or the rest of the option's
own argument) is a program in their language."""
_CODE_LONG = frozenset({"--eval", "--print", "--command"})
"""Long options whose value is an interpreter's program."""
_AWKS = frozenset({"awk", "gawk", "mawk", "nawk"})
_AWK_ARG_OPTIONS = frozenset("FvfeEilW")
"""awk options taking a value (`-F ,`, `-v n=1`, program files and texts, gawk's includes and libraries)."""
_SEDS = frozenset({"sed", "gsed"})
_SED_ARG_OPTIONS = frozenset("efl")
"""sed options taking a value (a script, a script file, a line length)."""
_LONG_ARG_OPTIONS = frozenset({"--file", "--exec", "--assign", "--field-separator", "--include", "--load",
                               "--line-length"})
"""awk's and sed's long options that take the next argument as their value."""
_VERSION = re.compile(r"-?[0-9][0-9.]*\Z")
_CLUSTER = re.compile(r"-[A-Za-z]+\Z")


def program_name(word: str) -> str:
    """The name of the program an argv word runs: its file's name without a version (`/usr/bin/python3.12` is
    `python`, `bash-5.2` is `bash`)."""
    name = os.path.basename(word)
    stripped = _VERSION.sub("", name)
    return stripped or name


def code_arguments(cmd: Sequence[str]) -> tuple[frozenset[int], dict[int, str]]:
    """Which arguments of argv `cmd` a program reads as code.

    A shell anywhere in the argv (`[env, sh, -c, ...]`, `[sudo, -u, x, bash, -ec, ...]`, `[timeout, 5, sh,
    -c, ...]`) whose options hold `c` (`-c`, `-ec`, `-e -c`, `-o pipefail -c`) takes its first operand as its
    script. Any other interpreter's program (`python -c`, `perl -e`, an awk or sed program) is code in a
    language wloadctl does not write, as is an argument that follows a `-c` after a shell's first operand
    (whether that shell reads it as its script cannot be told).

    Returns:
        The indices of shell scripts, and of other code with what it is (e.g. "python3's program (-c)").
    """
    scripts: set[int] = set()
    code: dict[int, str] = {}
    doubtful: dict[int, str] = {}
    for k, word in enumerate(cmd):
        name = program_name(word)
        if name in SHELLS:
            script, later = _shell_script(cmd, k)
            if script is not None:
                scripts.add(script)
            if later is not None:
                doubtful.setdefault(later, f"perhaps {os.path.basename(word)}'s script (a -c after its first "
                                           "operand)")
        elif name in _CODE_LETTERS:
            for j, how in _interpreter_code(cmd, k, _CODE_LETTERS[name]):
                code.setdefault(j, f"{os.path.basename(word)}'s program ({how})")
        elif name in _AWKS or name in _SEDS:
            awk = name in _AWKS
            for j in _operand_program(cmd, k, _AWK_ARG_OPTIONS if awk else _SED_ARG_OPTIONS, "fE" if awk else "f"):
                code.setdefault(j, f"{os.path.basename(word)}'s program")
    # (a shell's own -c makes its script certain; code of another language is refused even there: the safe side)
    code.update((j, why) for j, why in doubtful.items() if j not in scripts and j not in code)
    return frozenset(scripts - code.keys()), code


def _shell_script(cmd: Sequence[str], k: int) -> tuple[int | None, int | None]:
    """The script of the shell at `k` (None: it has no -c), and an argument after a later `-c` (None: none)."""
    c = False
    j, n = k + 1, len(cmd)
    while j < n:
        a = cmd[j]
        if a in ("--", "-"):
            j += 1
            break
        if a in _SHELL_ARG_OPTIONS:
            j += 2
        elif a.startswith("--"):
            j += 1  # --login, --norc, --posix
        elif len(a) > 1 and a[0] in "-+" and a[1:].isalpha():
            c = c or (a[0] == "-" and "c" in a)
            # (`-eo pipefail`: a cluster ending in o or O takes the next argument too)
            j += 2 if a[-1] in "oO" else 1
        else:
            break
    if c:
        return (j if j < n else None), None
    later = next((m for m in range(j, n - 1) if _CLUSTER.match(cmd[m]) and "c" in cmd[m]), None)
    return None, None if later is None else later + 1


def _interpreter_code(cmd: Sequence[str], k: int, letters: str) -> list[tuple[int, str]]:
    """The arguments after interpreter `k` that are its program: the value of each option among `letters` (or a
    long --eval/--print/--command), wherever it stands (an option of the interpreter's script of the same
    letter is taken for one too: the safe side)."""
    out: list[tuple[int, str]] = []
    for j in range(k + 1, len(cmd)):
        a = cmd[j]
        if a in _CODE_LONG:
            if j + 1 < len(cmd):
                out.append((j + 1, a))
        elif a.startswith(tuple(f"{long}=" for long in _CODE_LONG)):
            out.append((j, a.split("=", 1)[0]))
        elif len(a) > 1 and a[0] == "-" and a[1] != "-":
            for p, ch in enumerate(a[1:], 1):
                if ch in letters:
                    if p + 1 < len(a):
                        out.append((j, f"-{ch}"))  # `-cprint(1)`: the program is the rest of the argument
                    elif j + 1 < len(cmd):
                        out.append((j + 1, f"-{ch}"))
                    break
                if not ch.isalnum():
                    break
    return out


def _operand_program(cmd: Sequence[str], k: int, arg_options: frozenset[str], file_options: str) -> list[int]:
    """awk's or sed's program after `k`: each value of -e (gawk's program text, sed's script), else, without a
    program file (one of `file_options`), the first operand."""
    out: list[int] = []
    from_file = False
    j, n = k + 1, len(cmd)
    while j < n:
        a = cmd[j]
        if a == "--":
            j += 1
            break
        if a.startswith("--"):
            if a in ("--source", "--expression"):
                out.append(j + 1)
                j += 2
                continue
            if a.startswith(("--source=", "--expression=")):
                out.append(j)
            from_file = from_file or a.startswith(("--file", "--exec"))
            j += 2 if a in _LONG_ARG_OPTIONS else 1
            continue
        if len(a) < 2 or a[0] != "-":
            break
        letter = next((ch for ch in a[1:] if ch in arg_options), None)
        attached = letter is not None and not a.endswith(letter)
        if letter == "e":
            out.append(j if attached else j + 1)
        from_file = from_file or (letter is not None and letter in file_options)
        j += 1 if letter is None or attached else 2
    if not out and not from_file and j < n:
        out.append(j)
    return [m for m in out if m < n]
