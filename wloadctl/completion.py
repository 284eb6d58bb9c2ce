"""Shell completion: bash and zsh scripts made from the argument parser, and the job ids they offer."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from wloadctl.paths import newest_ids

SHELLS = ("bash", "zsh")
"""Shells `wloadctl completion` writes a script for."""

JOB_ARGS = ("job", "jobs")
"""Positional arguments (argparse dests) that take job ids of the current run."""

HIDDEN_PREFIX = "_"
"""Commands starting with this are internal (called by the scripts) and not offered."""


def commands(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Each public command of the parser with its option strings, in the parser's order."""
    out: dict[str, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if name.startswith(HIDDEN_PREFIX):
                    continue
                out[name] = [opt for a in sub._actions for opt in a.option_strings]
    return out


def job_commands(parser: argparse.ArgumentParser) -> list[str]:
    """Commands with a job id argument (verbs and read commands): their words complete to job ids."""
    out: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            out += [name for name, sub in action.choices.items()
                    if any(not a.option_strings and a.dest in JOB_ARGS for a in sub._actions)]
    return out


def top_options(parser: argparse.ArgumentParser) -> list[str]:
    """Options taken before the command (--help, --version)."""
    return [opt for a in parser._actions for opt in a.option_strings]


def _case_arms(cmds: dict[str, list[str]], indent: str, array: bool = False) -> str:
    """One `case` arm per command setting `opts` (a word list in bash, an array in zsh)."""
    left, right = ("(", ")") if array else ('"', '"')
    return "\n".join(f"{indent}{name}) opts={left}{' '.join(opts)}{right} ;;" for name, opts in cmds.items())


def bash_script(parser: argparse.ArgumentParser) -> str:
    """A bash completion script: `source <(wloadctl completion bash)`."""
    cmds = commands(parser)
    return f"""# bash completion for wloadctl: source <(wloadctl completion bash)
_wloadctl() {{
    local cur cmd="" i sd="" opts=""
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            --state-dir) sd="${{COMP_WORDS[i+1]}}" ;;
            --state-dir=*) sd="${{COMP_WORDS[i]#--state-dir=}}" ;;
            -*) ;;
            *) if [[ -z "$cmd" && "${{COMP_WORDS[i-1]}}" != --state-dir ]]; then cmd="${{COMP_WORDS[i]}}"; fi ;;
        esac
    done
    if [[ -z "$cmd" ]]; then
        if [[ "$cur" == -* ]]; then
            COMPREPLY=($(compgen -W "{" ".join(top_options(parser))}" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "{" ".join(cmds)}" -- "$cur"))
        fi
        return 0
    fi
    case "$cmd" in
{_case_arms(cmds, "        ")}
    esac
    if [[ "${{COMP_WORDS[COMP_CWORD-1]}}" == --state-dir ]]; then
        COMPREPLY=($(compgen -d -- "$cur"))
    elif [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    else
        case "$cmd" in
            {"|".join(job_commands(parser))})
                COMPREPLY=($(compgen -W "$(wloadctl _complete-jobs ${{sd:+--state-dir "$sd"}} 2>/dev/null)" \\
                    -- "$cur")) ;;
            *) COMPREPLY=($(compgen -f -- "$cur")) ;;
        esac
    fi
    return 0
}}
complete -F _wloadctl wloadctl
"""


def zsh_script(parser: argparse.ArgumentParser) -> str:
    """A zsh completion script: `source <(wloadctl completion zsh)` (after compinit)."""
    cmds = commands(parser)
    return f"""#compdef wloadctl
# zsh completion for wloadctl: source <(wloadctl completion zsh), after compinit
_wloadctl() {{
    local cmd="" sd="" i
    local -a opts
    for ((i = 2; i < CURRENT; i++)); do
        case "${{words[i]}}" in
            --state-dir) sd="${{words[i+1]}}" ;;
            -*) ;;
            *) if [[ -z "$cmd" && "${{words[i-1]}}" != --state-dir ]]; then cmd="${{words[i]}}"; fi ;;
        esac
    done
    if [[ -z "$cmd" ]]; then
        compadd -- {" ".join(cmds)} {" ".join(top_options(parser))}
        return
    fi
    case "$cmd" in
{_case_arms(cmds, "        ", array=True)}
    esac
    if [[ "${{words[CURRENT-1]}}" == --state-dir ]]; then
        _files -/
    elif [[ "${{words[CURRENT]}}" == -* ]]; then
        compadd -- $opts
    else
        case "$cmd" in
            {"|".join(job_commands(parser))})
                compadd -- ${{(f)"$(wloadctl _complete-jobs ${{sd:+--state-dir "$sd"}} 2>/dev/null)"}} ;;
            *) _files ;;
        esac
    fi
}}
compdef _wloadctl wloadctl
"""


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script of a shell (one of SHELLS)."""
    return bash_script(parser) if shell == "bash" else zsh_script(parser)


def job_ids(state_dir: str | None) -> list[str]:
    """Job ids of the latest run of a state directory (given, $WLOADCTL_STATE_DIR, or the newest one).

    Reads only the id list the scheduler writes: no journal, no plan, nothing when there is no run.
    """
    if state_dir:
        return newest_ids(Path(state_dir))
    env = os.environ.get("WLOADCTL_STATE_DIR")
    if env:
        return newest_ids(Path(env))
    # The newest journal under the default root, as resolve_state_dir finds it, without the
    # client's imports: a completion must answer while the user types.
    from wloadctl.store import DB_NAME, default_state_dir

    base = default_state_dir("x").parent
    journals = sorted(base.glob(f"*/{DB_NAME}"), key=lambda p: p.stat().st_mtime) if base.exists() else []
    return newest_ids(journals[-1].parent) if journals else []
