"""The new-run form: pick a preset, edit the main fields, validate (field checks here, the full config through
core.config), then launch through core.procman — the run queues if its GPUs are busy."""

from __future__ import annotations

import re
from typing import Any, Optional

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Input, Label, Select, Static

from app.screens.base import KrlScreen
from app.widgets.key_bar import KeyBar
from app.screens.focus import leave_text_box
from app.screens.loaders import flatten
from app.screens.messages import ActionDone

BACKENDS = ("tinker", "local", "openai", "replay")
FALLBACK_PRESETS = ("kevin", "single-turn", "demo")
# field id -> (label, dotted config key, kind)
FIELDS = (
    ("name", "run name (optional)", None, "name"),
    ("model", "model", "model", "text"),
    ("problems", "problem set", "problems", "text"),
    ("batch", "batch size (problems per step)", "dataset.batch_size", "posint"),
    ("group", "group size (samples per problem)", "dataset.group_size", "posint"),
    ("turns", "turns per episode", "max_turns", "posint"),
    ("steps", "training steps", "max_steps", "posint"),
    ("weights", "reward weights (name=value …)", "reward.weights", "weights"),
    ("gpus", "GPUs", "gpus", "nonneg"),
    ("extra", "other overrides (key=value …)", None, "overrides"),
)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,119}$")


# core's messages name CLI options; in the form they name its fields and the TUI's keys.
_FORM_WORDS = ((re.compile(r"Use --gpus (\d+)"), r"Set GPUs to \1"), (re.compile(r"--gpus"), "GPUs"),
               (re.compile(r"Choose another --name"), "Choose another run name"),
               (re.compile(r"resume it with `krl runs resume [^`]*`"), "resume it from the runs screen (r)"),
               (re.compile(r"fork it to train further \(`krl runs fork [^`]*`\)"),
                "fork it from the runs screen (f) to train further"))


def form_wording(message: str) -> str:
    """A core error as the form says it: fields and keys instead of CLI options."""
    for pattern, replacement in _FORM_WORDS:
        message = pattern.sub(replacement, message)
    return message


def machine_defaults(presets: list[str], gpu_count: int, has_tinker_key: bool) -> tuple[str, list[str]]:
    """The preset the form opens on for this machine, and why the others may not run here: without a Tinker key
    the kevin preset's first launch fails, so the form starts from the demo (replayed responses, CPU evaluator)."""
    notes = []
    if not has_tinker_key:
        notes.append("tinker backend: needs TINKER_API_KEY, which is not set")
    if gpu_count == 0:
        notes.append("local backend and GPU timing: need a CUDA GPU, none found here (GPUs set to 0: the evaluator "
                     "runs on CPU)")
    preferred = "kevin" if has_tinker_key else "demo"
    chosen = preferred if preferred in presets else presets[0]
    return chosen, notes


def _format_weights(weights: Any) -> str:
    if not isinstance(weights, dict):
        return ""
    return " ".join(f"{k}={v}" for k, v in weights.items())


def form_defaults(config: dict[str, Any]) -> dict[str, str]:
    """The form's field values for a resolved preset config."""
    flat = flatten(config)
    values = {"name": "", "extra": "", "backend": str(config.get("backend", ""))}
    for field_id, _label, key, kind in FIELDS:
        if key is None:
            continue
        if kind == "weights":
            values[field_id] = _format_weights((config.get("reward") or {}).get("weights"))
        else:
            value = flat.get(key)
            values[field_id] = "" if value is None else str(value)
    return values


def build_overrides(values: dict[str, str], defaults: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """Field values → dotted overrides for fields that differ from the preset, plus per-field errors."""
    overrides: list[str] = []
    errors: dict[str, str] = {}
    name = values.get("name", "").strip()
    if name and not _NAME_RE.match(name):
        errors["name"] = "letters, digits, '-', '_' and '.', no spaces or '/'"
    if values.get("backend") and values.get("backend") != defaults.get("backend"):
        overrides.append(f"backend={values['backend']}")
    for field_id, label, key, kind in FIELDS:
        raw = values.get(field_id, "").strip()
        if kind in ("posint", "nonneg"):
            try:
                number = int(raw)
                if number < (1 if kind == "posint" else 0):
                    raise ValueError
            except ValueError:
                errors[field_id] = "must be a whole number " + ("≥ 1" if kind == "posint" else "≥ 0")
                continue
        if kind == "weights":
            pairs = raw.split()
            for pair in pairs:
                k, sep, v = pair.partition("=")
                try:
                    float(v)
                except ValueError:
                    errors[field_id] = f"'{pair}' is not name=number"
                    break
                if not sep or not k:
                    errors[field_id] = f"'{pair}' is not name=number"
                    break
            else:
                if raw != defaults.get(field_id, "").strip():
                    overrides += [f"reward.weights.{p.split('=', 1)[0]}={p.split('=', 1)[1]}" for p in pairs]
            continue
        if kind == "overrides":
            for item in raw.split():
                if "=" not in item or item.startswith("="):
                    errors[field_id] = f"'{item}' is not key=value"
                    break
            else:
                overrides += raw.split()
            continue
        if kind == "text" and not raw:
            errors[field_id] = "required"
            continue
        if key and raw != defaults.get(field_id, "").strip():
            overrides.append(f"{key}={raw}")
    return overrides, errors


class NewRunScreen(KrlScreen):
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="new.cancel"),
        Binding("ctrl+s", "launch", "Launch", id="new.launch"),
        # priority: a text box binds ctrl+e (end of line) itself and would swallow it while it has focus.
        Binding("ctrl+e", "evaluate", "Evaluate instead", id="new.evaluate", priority=True),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.defaults: dict[str, str] = {}
        self.launching = False
        self.launch_kind: Optional[str] = None  # "eval": the form's model is evaluated, not trained
        self.shown_preset: Optional[str] = None  # the preset whose values the fields hold
        self.gpu_count: Optional[int] = None  # GPUs this machine has (procman.detect_gpus), once presets load

    def compose(self) -> ComposeResult:
        yield Static("[b]New run[/b] · fields start from the preset; only what you change becomes an override",
                     id="new-title")
        with VerticalScroll(id="new-form"):
            with Horizontal(classes="form-row"):
                yield Label("preset", classes="form-label")
                yield Select([(p, p) for p in FALLBACK_PRESETS], value="kevin", allow_blank=False, id="new-preset")
            with Horizontal(classes="form-row"):
                yield Label("backend", classes="form-label")
                yield Select([(b, b) for b in BACKENDS], value="tinker", allow_blank=False, id="new-backend")
            for field_id, label, _key, _kind in FIELDS:
                with Horizontal(classes="form-row"):
                    yield Label(label, classes="form-label")
                    yield Input(id=f"new-{field_id}")
                yield Static("", id=f"err-{field_id}", classes="field-error")
            yield Static("", id="new-machine")
            yield Static("", id="new-errors")
            with Horizontal(id="new-buttons"):
                yield Button("Launch (ctrl+s)", variant="primary", id="new-launch")
                yield Button("Cancel (esc)", id="new-cancel")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one("#new-preset", Select).focus()
        self.load_presets()

    # ---------------------------------------------------------------- workers

    @work(thread=True, exclusive=True, group="new-preset", exit_on_error=False)
    def load_presets(self, preset: Optional[str] = None) -> None:
        try:
            import os

            from core.config import list_presets, load_config
            from core.procman import detect_gpus

            presets = list_presets()
            self.gpu_count = len(detect_gpus())
            machine_choice, notes = machine_defaults(presets, self.gpu_count, bool(os.environ.get("TINKER_API_KEY")))
            chosen = preset or machine_choice
            config = load_config(chosen).model_dump(mode="json")
        except Exception as exc:  # core.config missing or a broken preset: the form still opens
            self.app.call_from_thread(self._show_errors, {}, f"cannot load presets: {exc}")
            return
        self.app.call_from_thread(self._apply_preset, presets, chosen, config, notes)

    @work(thread=True, exclusive=True, group="new-launch", exit_on_error=False)
    def launch(self, preset: str, overrides: list[str], name: Optional[str], gpus: int,
               kind: Optional[str] = None) -> None:
        try:
            from core.config import load_config
            from core import procman

            config = load_config(preset, overrides)
            run = procman.start_run(config, name=name, gpus=gpus, preset=preset, detach=True,
                                    workspace=str(self.app.workspace), kind=kind)
            self.post_message(ActionDone(f"started {run.get('name', name or '')} ({run.get('status', 'queued')})"))
        except Exception as exc:
            from core.errors import KrlError

            message = form_wording(str(exc)) if isinstance(exc, KrlError) else f"{type(exc).__name__}: {exc}"
            self.app.call_from_thread(self._show_errors, {}, message)

    # ---------------------------------------------------------------- UI updates

    def _apply_preset(self, presets: list[str], chosen: str, config: dict[str, Any], notes: list[str] = ()) -> None:
        select = self.query_one("#new-preset", Select)
        with select.prevent(Select.Changed):
            select.set_options([(p, p) for p in presets])
            select.value = chosen
        self.defaults = form_defaults(config)
        self.shown_preset = chosen
        for field_id, *_ in FIELDS:
            self.query_one(f"#new-{field_id}", Input).value = self.defaults.get(field_id, "")
        backend = self.query_one("#new-backend", Select)
        if self.defaults.get("backend") in BACKENDS:
            backend.value = self.defaults["backend"]
        if self.gpu_count is not None and int(self.defaults.get("gpus") or 0) > self.gpu_count:
            # More GPUs than this machine has would queue for ever: ask for what is here (an override, shown).
            self.query_one("#new-gpus", Input).value = str(self.gpu_count)
        self.query_one("#new-machine", Static).update(
            "[b]On this machine[/b]: " + "; ".join(notes) + "." if notes else "")
        self._show_errors({}, "")

    def _show_errors(self, errors: dict[str, str], general: str) -> None:
        self.launching = False
        for field_id, *_ in FIELDS:
            box = self.query_one(f"#new-{field_id}", Input)
            message = errors.get(field_id, "")
            box.set_class(bool(message), "-invalid")
            line = self.query_one(f"#err-{field_id}", Static)
            line.update(message)
            line.display = bool(message)
        self.query_one("#new-errors", Static).update(general)

    def values(self) -> dict[str, str]:
        values = {field_id: self.query_one(f"#new-{field_id}", Input).value for field_id, *_ in FIELDS}
        values["backend"] = str(self.query_one("#new-backend", Select).value)
        return values

    @on(Select.Changed, "#new-preset")
    def _preset_changed(self, event: Select.Changed) -> None:
        # The select's own first value arrives as a change too, possibly after the machine's default was applied:
        # only a preset other than the one shown is loaded.
        chosen = str(event.select.value)
        if self.shown_preset is None or chosen == self.shown_preset:
            return
        self.load_presets(chosen)

    @on(Button.Pressed, "#new-launch")
    def action_launch(self) -> None:
        if self.launching:
            return
        overrides, errors = build_overrides(self.values(), self.defaults)
        if errors:
            self._show_errors(errors, f"{len(errors)} field(s) need fixing")
            return
        self._show_errors({}, "validating and launching…")
        self.launching = True
        values = self.values()
        self.launch(str(self.query_one("#new-preset", Select).value), overrides,
                    values["name"].strip() or None, int(values["gpus"]), self.launch_kind)

    def action_evaluate(self) -> None:
        """Evaluate the form's model over its problems (a run of kind 'eval', evaluation.samples per problem)."""
        self.launch_kind = "eval"
        try:
            self.action_launch()
        finally:
            self.launch_kind = None

    def on_action_done(self, message: ActionDone) -> None:
        self.app.notify(message.text)
        self.app.pop_screen()

    def action_cancel(self) -> None:
        """esc in a field leaves the field (to the Launch button); esc elsewhere closes the form."""
        if not leave_text_box(self, self.query_one("#new-launch", Button)):
            self.app.pop_screen()

    @on(Button.Pressed, "#new-cancel")
    def _cancel_pressed(self) -> None:
        self.app.pop_screen()
