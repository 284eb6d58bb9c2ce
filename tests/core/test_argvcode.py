"""Which arguments of an argv command are a shell's script, and which another language's program."""

from __future__ import annotations

import pytest

from wloadctl.core.argvcode import code_arguments, program_name

SCRIPTS = [
    (("sh", "-c", "S"), 2),
    (("bash", "-ec", "S"), 2),
    (("sh", "-xc", "S"), 2),
    (("bash", "-euxc", "S"), 2),
    (("bash", "-lc", "S"), 2),
    (("bash", "-l", "-c", "S"), 3),
    (("bash", "-e", "-c", "S"), 3),
    (("bash", "-c", "-e", "S"), 3),
    (("bash", "-o", "pipefail", "-c", "S"), 4),
    (("bash", "-eo", "pipefail", "-c", "S"), 4),
    (("bash", "--norc", "--rcfile", "f", "-c", "S"), 5),
    (("zsh", "--emulate", "sh", "-c", "S"), 4),
    (("/usr/bin/env", "sh", "-c", "S"), 3),
    (("sudo", "-u", "x", "sh", "-c", "S"), 5),
    (("nice", "bash", "-c", "S"), 3),
    (("timeout", "5", "sh", "-c", "S"), 4),
    (("busybox", "sh", "-c", "S"), 3),
    (("/bin/dash", "-c", "S"), 2),
    (("bash5.2", "-c", "S"), 2),
    (("ksh93", "-c", "S"), 2),
    (("sh", "-c", "--", "S"), 3),
]


@pytest.mark.parametrize(("argv", "script"), SCRIPTS, ids=[" ".join(a) for a, _ in SCRIPTS])
def test_a_shell_anywhere_in_an_argv_with_c_among_its_options_takes_its_first_operand_as_script(
        argv: tuple[str, ...], script: int) -> None:
    assert code_arguments(argv) == (frozenset({script}), {})


@pytest.mark.parametrize("argv", [
    ("bash", "script.sh", "ITEM"),
    ("sh", "-e", "script.sh", "ITEM"),
    ("sh", "-c", 'echo "$1"', "sh", "ITEM"),
    ("grep", "-c", "ITEM", "f"),
    ("ssh", "-c", "aes128-ctr", "host", "ITEM"),
    ("python3", "load.py", "--region", "ITEM"),
    ("awk", "-f", "prog.awk", "-v", "r=ITEM", "ITEM"),
    ("sed", "-f", "prog.sed", "ITEM"),
])
def test_other_arguments_are_no_code(argv: tuple[str, ...]) -> None:
    scripts, code = code_arguments(argv)
    assert argv.index("ITEM") not in scripts | code.keys()


@pytest.mark.parametrize(("argv", "index", "what"), [
    (("python3", "-c", "P"), 2, "python3's program (-c)"),
    (("/usr/bin/python3.12", "-I", "-c", "P"), 3, "python3.12's program (-c)"),
    (("python3", "-cP"), 1, "python3's program (-c)"),
    (("perl", "-ne", "P"), 2, "perl's program (-e)"),
    (("ruby", "-e", "P"), 2, "ruby's program (-e)"),
    (("node", "--eval", "P"), 2, "node's program (--eval)"),
    (("awk", "P", "f"), 1, "awk's program"),
    (("gawk", "-F", ",", "-v", "x=1", "P", "f"), 5, "gawk's program"),
    (("gawk", "-i", "inplace", "P", "f"), 3, "gawk's program"),
    (("sed", "-n", "P", "f"), 2, "sed's program"),
    (("sed", "-e", "P", "f"), 2, "sed's program"),
    (("sed", "-i", "P", "f"), 2, "sed's program"),
    (("env", "python3", "-c", "P"), 3, "python3's program (-c)"),
    (("bash", "script.sh", "-c", "P"), 3, "perhaps bash's script (a -c after its first operand)"),
])
def test_another_languages_program_is_code(argv: tuple[str, ...], index: int, what: str) -> None:
    scripts, code = code_arguments(argv)
    assert code.get(index) == what and index not in scripts


def test_a_shells_own_c_makes_its_script_certain_even_after_another_shells_operand() -> None:
    assert code_arguments(("sh", "-c", 'exec "$@"', "sh", "bash", "-c", "S")) == (frozenset({2, 6}), {})


def test_program_name_drops_folder_and_version() -> None:
    assert [program_name(w) for w in ("/usr/bin/python3.12", "bash-5.2", "sh", "ksh93", "2")] == [
        "python", "bash", "sh", "ksh", "2"]
