"""Screens an operator acts from: a key per verb, the impact dialog, the client call."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any, ClassVar, cast

from textual import events, work
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.worker import get_current_worker

from tui.commands import resolve
from tui.impact import VERB_KEYS, impact
from tui.messages import Note
from tui.screens.confirm import ActionRequest, ConfirmScreen
from wloadctl.access import needed
from wloadctl.errors import WloadError

VERB_LABELS = {
    "hold": "Hold",
    "release": "Release",
    "retry": "Retry",
    "rerun": "Rerun",
    "kill": "Kill",
    "set-ok": "OK",
    "skip": "Skip",
}
"""Footer labels of the verbs."""

RESUMING_VERBS = frozenset({"retry", "rerun"})
"""Verbs after which a stopped run is resumed, so the jobs they reopen run."""


_VERB_CHARACTERS = frozenset(VERB_KEYS.values())
"""The keys of the verbs."""


class OperatorScreen(Screen[None]):
    """Base of the screens with verbs; subclasses say which jobs are selected."""

    VERB_BINDINGS: ClassVar[list[BindingType]] = [
        Binding(key, f"verb('{verb}')", VERB_LABELS[verb])
        for verb, key in VERB_KEYS.items()
    ]
    """A key per verb; subclasses place them in BINDINGS where the footer shows them."""

    @property
    def console(self) -> Any:
        """The console app (typed loosely: tests mount screens in their own apps)."""
        return self.app

    def selected_jobs(self) -> list[str]:
        """The jobs a verb applies to."""
        return []

    def after_action(self, request: ActionRequest, reply: dict[str, Any]) -> None:
        """Called on the UI thread once the scheduler answered."""

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A read-only console has no verbs (they leave the footer); those beyond the role are greyed."""
        if action == "verb" and getattr(self.app, "readonly", False):
            return False
        allowed = getattr(self.app, "allowed", None)
        if action == "verb" and allowed is not None and parameters and parameters[0] not in allowed:
            return None
        return True

    def on_key(self, event: events.Key) -> None:
        """A verb's key in a read-only console says why nothing happens (its binding is off there)."""
        if getattr(self.app, "readonly", False) and event.character in _VERB_CHARACTERS:
            event.stop()
            self.notify("read-only console: no actions", severity="warning")

    def action_verb(self, verb: str) -> None:
        """Ask to apply `verb` to the selected jobs."""
        self.ask_verb(verb, self.selected_jobs())

    def ask_verb(
        self, verb: str, jobs: list[str], downstream: bool = False, names: tuple[str, ...] = ()
    ) -> None:
        """Show the impact of `verb` on `jobs` (or on the jobs `names` match) and send it if confirmed.

        Args:
            verb: one of VERB_KEYS.
            jobs: the selected job ids (when no names are given).
            downstream: for rerun, whether finished downstream jobs run again too.
            names: ids and globs as the operator typed them (`:hold load_*`): matched here for the
                impact, and sent as typed, as the CLI sends them (a glob naming thousands of jobs
                is a few bytes, their ids would not fit in one request).
        """
        app = self.console
        if getattr(app, "readonly", False):
            self.notify("read-only console: no actions", severity="warning")
            return
        allowed = getattr(app, "allowed", None)
        if allowed is not None and verb not in allowed:
            self.notify(f"{verb} needs the {needed(verb).label} role; you are "
                        f"{app.role or 'without a role'} in this run", severity="warning")
            return
        if app.model is None or app.dag is None:
            return
        if not jobs and not names:
            self.notify("no job selected", severity="warning")
            return
        self._weigh(verb, jobs, downstream, names)

    @work(thread=True, exclusive=True, group="impact", exit_on_error=False)
    def _weigh(self, verb: str, jobs: list[str], downstream: bool, names: tuple[str, ...]) -> None:
        """Match the names and work out the impact off the UI thread (a big run's graph takes a while),
        then ask for the confirmation on it."""
        app = self.console
        model, dag = app.model, app.dag
        if names:
            idxs, unknown = resolve(names, model.ids, model.index)
            if unknown:
                app.call_from_thread(self.notify, f"no job matches {', '.join(unknown)}", severity="error")
                return
        else:
            index = model.index
            idxs = [index[j] for j in jobs if j in index]
        gated = getattr(app, "four_eyes_jobs", {}).get(verb, frozenset())
        first = impact(verb, idxs, model, dag, downstream, gated)
        # Rerun's dialog switches the downstream on and off: both answers are ready before it opens.
        other = impact(verb, idxs, model, dag, not downstream, gated) if verb == "rerun" else first
        # The run's four eyes, or those of a job the verb reaches, turn it into a request: the dialog says so
        # before y (the scheduler decides).
        run_wide = verb in getattr(app, "four_eyes", frozenset())
        for imp in (first, other):
            imp.second = run_wide or bool(imp.gated)
        answers = {downstream: first, not downstream: other}
        if get_current_worker().is_cancelled:
            return  # the operator asked again meanwhile: that dialog comes instead
        app.call_from_thread(
            app.push_screen,
            ConfirmScreen(first, answers.__getitem__),
            partial(self._confirmed, names),
        )

    def _confirmed(self, names: tuple[str, ...], request: ActionRequest | None) -> None:
        if request is not None:
            self.send_action(replace(request, names=names))

    @work(thread=True, group="control", exit_on_error=False)
    def send_action(self, request: ActionRequest) -> None:
        """Send a confirmed verb by the CLI's path: scheduler queue, or the journal."""
        app = self.console
        try:
            with app.client_lock:
                reply = cast(
                    dict[str, Any],
                    app.action_client().control(
                        request.verb,
                        list(request.names or request.jobs),
                        request.reason,
                        request.downstream,
                    ),
                )
        except WloadError as e:
            reply = {"ok": False, "error": e.one_line()}
        # Anything else (a journal locked for too long, a full queue) is the operator's
        # to see as a failed action, not a crash of the console.
        except Exception as e:
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        resumed = None
        sup = getattr(app, "supervisor", None)
        applied = [r for r in reply.get("results", []) if r[1] and r[0] != "*"]
        if (
            applied
            and not reply.get("live", True)
            and request.verb in RESUMING_VERBS
            and sup is not None
        ):
            try:
                resumed = sup.resume().text
            except (WloadError, OSError) as e:
                resumed = f"could not resume the run: {e}"
        app.call_from_thread(self._reported, request, reply, resumed)

    def _reported(
        self, request: ActionRequest, reply: dict[str, Any], resumed: str | None
    ) -> None:
        app = self.console
        results = [r for r in reply.get("results", []) if r[0] != "*"]
        applied = [r for r in results if r[1]]
        refused = [r for r in results if not r[1]]
        # A scheduler sends the first answers of a verb on many jobs, and counts them all.
        n_applied = int(reply.get("applied", len(applied)))
        n_refused = int(reply.get("refused", len(refused)))
        pending = reply.get("pending")
        if reply.get("error"):
            text, level = f"{request.verb} failed: {reply['error']}", "error"
        elif pending:
            # Four eyes: nothing is applied yet, a request waits for another person.
            rid = pending.get("id", "?")
            jobs = ", ".join(pending.get("jobs") or request.jobs)
            text = (
                f"{request.verb} {jobs}: request {rid} needs another admin's approve "
                f"(A, or `wloadctl approve {rid}`); nothing done yet"
            )
            level = "warning"
        elif refused or n_refused:
            text = f"{request.verb}: {n_applied} applied, {n_refused} refused" + (
                f": {refused[0][2]}" if refused else ""
            )
            level = "warning"
        else:
            text = f"{request.verb}: {n_applied} job(s) - " + (
                applied[0][2] if applied else "nothing to do"
            )
            level = "information"
        app.add_note(Note(text, level, app.clock(), ("action",)))
        if resumed:
            app.add_note(Note(resumed, "information", app.clock(), ("scheduler",)))
        app.feed.wake.set()
        self.after_action(request, reply)
